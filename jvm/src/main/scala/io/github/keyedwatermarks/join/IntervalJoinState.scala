package io.github.keyedwatermarks.join

import org.apache.spark.sql.Row
import org.apache.spark.sql.streaming.{ListState, StatefulProcessorHandle, TTLConfig, ValueState}
import org.apache.spark.sql.types.{BooleanType, LongType, StructField, StructType}

import io.github.keyedwatermarks.catalyst.TaskReadyEncoder

/**
 * One key's interval join state in Spark's state store (RocksDB provider):
 *  - `interval_key`: the key's max left and max right times (null before its first row there),
 *    and how many left and right rows it keeps (for the key metrics, without reading the lists);
 *  - `interval_left`: the left rows kept (time, whether it has matched, row);
 *  - `interval_right`: the right rows kept (time, row).
 * Rows are stored as [[JoinInputs.stored]] lays them out.
 */
private[keyedwatermarks] final class IntervalJoinState(handle: StatefulProcessorHandle, leftSchema: StructType,
    rightSchema: StructType) {
  import IntervalJoinState._

  private val keyRow: ValueState[Row] =
    handle.getValueState("interval_key", TaskReadyEncoder.row(KeySchema), TTLConfig.NONE)
  private val lefts: ListState[Row] = handle.getListState("interval_left",
    TaskReadyEncoder.row(StructType(Seq(
          StructField("time", LongType, nullable = false), StructField("matched", BooleanType, nullable = false),
          StructField("row", JoinInputs.stored(leftSchema), nullable = false)))), TTLConfig.NONE)
  private val rights: ListState[Row] =
    handle.getListState("interval_right", TaskReadyEncoder.row(JoinInputs.timed(rightSchema)), TTLConfig.NONE)

  /** The max left and right times, and the counts of kept left and right rows. */
  def key(): KeyRow = Option(keyRow.get()) match {
    case None => KeyRow(None, None, 0L, 0L)
    case Some(r) =>
      KeyRow(Option(r.get(0)).map(_ => r.getLong(0)), Option(r.get(1)).map(_ => r.getLong(1)), r.getLong(2),
        r.getLong(3))
  }

  def leftRows(): Vector[Held] = lefts.get().map(r => Held(r.getLong(0), r.getStruct(2), r.getBoolean(1))).toVector

  def rightRows(): Vector[Held] = rights.get().map(r => Held(r.getLong(0), r.getStruct(1), matched = false)).toVector

  def storeKey(k: KeyRow): Unit =
    keyRow.update(Row(k.maxLeft.getOrElse(null), k.maxRight.getOrElse(null), k.leftRows, k.rightRows))

  /** All of the key's left rows now (`replace`), or only rows to append after the stored ones. */
  def storeLefts(rows: Seq[Held], replace: Boolean): Unit =
    store(lefts, rows.map(h => Row(h.time, h.matched, h.row)), replace)

  def storeRights(rows: Seq[Held], replace: Boolean): Unit = store(rights, rows.map(h => Row(h.time, h.row)), replace)

  private def store(list: ListState[Row], rows: Seq[Row], replace: Boolean): Unit =
    if (replace) { if (rows.isEmpty) list.clear() else list.put(rows.toArray) }
    else if (rows.nonEmpty) list.appendList(rows.toArray)
}

private[keyedwatermarks] object IntervalJoinState {
  val KeySchema: StructType = StructType(Seq(
      StructField("max_left", LongType, nullable = true), StructField("max_right", LongType, nullable = true),
      StructField("left_rows", LongType, nullable = false), StructField("right_rows", LongType, nullable = false)))

  /** The key's row: its max times per side and its kept rows per side. */
  final case class KeyRow(maxLeft: Option[Long], maxRight: Option[Long], leftRows: Long, rightRows: Long)

  /** A kept row: its time, its columns, and (left rows) whether it has matched a right row. */
  final class Held(val time: Long, val row: Row, var matched: Boolean)
  object Held { def apply(time: Long, row: Row, matched: Boolean): Held = new Held(time, row, matched) }
}
