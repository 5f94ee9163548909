package io.github.keyedwatermarks.join

import org.apache.spark.sql.Row
import org.apache.spark.sql.streaming.{ListState, StatefulProcessorHandle, TTLConfig, ValueState}
import org.apache.spark.sql.types.{LongType, StructField, StructType}

import io.github.keyedwatermarks.catalyst.TaskReadyEncoder

/**
 * One key's as-of join state in Spark's state store (RocksDB provider):
 *  - `join_key`: the key's max reading time (its readings watermark is that minus lateness);
 *  - `join_held`: the readings held until the versions watermark passes them (time, row);
 *  - `join_versions`: the key's versions within its horizon (time, row), sorted by time.
 * Rows are stored as [[JoinInputs.stored]] lays them out.
 */
private[keyedwatermarks] final class AsOfJoinState(handle: StatefulProcessorHandle, readingSchema: StructType,
    versionSchema: StructType) {
  import AsOfJoinState._

  private val keyRow: ValueState[Row] =
    handle.getValueState("join_key", TaskReadyEncoder.row(KeySchema), TTLConfig.NONE)
  private val held: ListState[Row] =
    handle.getListState("join_held", TaskReadyEncoder.row(JoinInputs.timed(readingSchema)), TTLConfig.NONE)
  private val versions: ListState[Row] =
    handle.getListState("join_versions", TaskReadyEncoder.row(JoinInputs.timed(versionSchema)), TTLConfig.NONE)

  def maxReading(): Option[Long] = Option(keyRow.get()).map(_.getLong(0))

  def heldReadings(): Vector[(Long, Row)] =
    held.get().map(r => (r.getLong(0), r.getStruct(1))).toVector

  /** The key's versions, in time order: they are stored so (AsOfRule.put and prune keep the order). */
  def keyVersions(): Vector[AsOfRule.Version[Row]] =
    versions.get().map(r => AsOfRule.Version(r.getLong(0), r.getStruct(1))).toVector

  def storeMaxReading(max: Long): Unit = keyRow.update(Row(max))

  /** The held readings now: all of them (after a release). */
  def storeHeld(heldNow: Vector[(Long, Row)]): Unit =
    if (heldNow.isEmpty) held.clear() else held.put(heldNow.map { case (t, r) => Row(t, r) }.toArray)

  /** Readings newly held, after those held already (none released). */
  def appendHeld(more: Vector[(Long, Row)]): Unit =
    if (more.nonEmpty) held.appendList(more.map { case (t, r) => Row(t, r) }.toArray)

  def storeVersions(versionsNow: Vector[AsOfRule.Version[Row]]): Unit =
    if (versionsNow.isEmpty) versions.clear() else versions.put(versionsNow.map(v => Row(v.time, v.row)).toArray)
}

private[keyedwatermarks] object AsOfJoinState {
  val KeySchema: StructType = StructType(Seq(StructField("max_reading", LongType, nullable = false)))
}
