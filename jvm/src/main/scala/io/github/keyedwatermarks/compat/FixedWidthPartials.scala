package io.github.keyedwatermarks.compat

import scala.collection.mutable.ArrayBuffer

import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{JoinedRow, SpecificInternalRow, UnsafeRow}
import org.apache.spark.sql.execution.UnsafeFixedWidthAggregationMap
import org.apache.spark.sql.execution.metric.SQLMetric
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{LongType, StructField, StructType}

import io.github.keyedwatermarks.window.WindowAssigner

/**
 * A partition's partials in Spark's own `UnsafeFixedWidthAggregationMap` (a BytesToBytesMap in
 * task-managed memory, what HashAggregateExec uses), when every payload field is fixed-width.
 * The map's value *is* the payload: aggregate buffers updated in place by Spark's projections,
 * then window start, row count, max event time and the policy's maxima (the layout in
 * [[PartialAggregation]]), so a partial is output by copying its bytes. This avoids a JVM
 * object, a buffer row and a payload projection per (key, window), which dominate with many
 * keys (see benchmarks/results/profile.md).
 *
 * If task memory runs out, the partials so far are output (copied) and the map starts over:
 * a (key, window) may then have two partials from one partition, which the operator merges
 * like partials from different partitions.
 */
private[compat] final class FixedWidthPartials(
    agg: CatalystAggregation,
    assigner: WindowAssigner,
    columns: PartialInputs,
    payload: StructType,
    invalid: InvalidRowCounter,
    out: PartialOutput,
    flushes: SQLMetric) extends PartitionPartials {

  // Payload ordinals, by name (the layout is PartialAggregation's); -1 when absent.
  private def ordinal(name: String) = payload.fieldNames.indexOf(name)
  private val buffers = agg.bufferSchema.length
  private val startOrdinal = ordinal(PartialAggregation.WindowStart)
  private val rowsOrdinal = ordinal(PartialAggregation.Rows)
  private val maxEventTimeOrdinal = ordinal(PartialAggregation.MaxEventTime)
  private val latenessOrdinal = ordinal(PartialAggregation.Lateness)
  private val sessionEndOrdinal = ordinal(PartialAggregation.SessionEnd)
  private val groupKey = columns.groupKeyProjection()
  private val update = agg.updaterWithTrailingFields(payload.length - buffers)
  private val slide = assigner.slideMicros
  private val keySchema = StructType(columns.groupKey.zipWithIndex.map { case (e, i) =>
    StructField(s"k$i", e.dataType, e.nullable)
  })
  // A new partial: initial buffers, row count 0, and the maxima (event time, lateness,
  // session end) at Long.MinValue; the window start is set by every update.
  private val emptyPayload: InternalRow = {
    val meta = new SpecificInternalRow(Seq.fill(payload.length - buffers)(LongType))
    var i = 0
    while (i < payload.length - buffers) { meta.setLong(i, Long.MinValue); i += 1 }
    meta.setLong(rowsOrdinal - buffers, 0L)
    new JoinedRow(agg.newBuffer(), meta)
  }
  private val task = TaskContext.get()
  private var map: UnsafeFixedWidthAggregationMap = newMap()
  task.addTaskCompletionListener[Unit](_ => map.free())

  // Pages of at most 4 MiB: Spark's default page (up to 64 MiB, zeroed on allocation) is far
  // more than a partition's partials need with few keys; the map adds pages as it grows.
  private def newMap() = new UnsafeFixedWidthAggregationMap(
    emptyPayload, payload, keySchema, task, 1 << 16, math.min(SparkBridge.pageSizeBytes(task), 4L << 20))

  override def aggregate(rows: Iterator[InternalRow]): Iterator[InternalRow] = {
    val flushed = ArrayBuffer.empty[InternalRow]
    while (rows.hasNext) {
      val row = rows.next()
      if (!invalid.skip(row)) {
        val t = row.getLong(columns.eventTime)
        // The row's windows, latest first (see WindowAssigner.foreachWindowStart; a loop here,
        // not a closure per row).
        val lastStart = assigner.lastWindowStart(t)
        val windows = assigner.windowCount(t, lastStart)
        var w = 0
        while (w < windows) {
          val start = lastStart - w * slide
          val key = groupKey(row, start)
          var p = map.getAggregationBufferFromUnsafeRow(key)
          if (p == null) {
            // Out of task memory: output what we have and start a new map.
            drain(map).foreach(r => flushed += r.copy())
            map = newMap()
            flushes += 1
            p = map.getAggregationBufferFromUnsafeRow(key)
            if (p == null) throw new OutOfMemoryError("keyed-watermarks: no task memory for one partial")
          }
          update(p, row)
          p.setLong(startOrdinal, start)
          // Counted in its last window only (see OnHeapPartials).
          if (w == 0) p.setLong(rowsOrdinal, p.getLong(rowsOrdinal) + 1)
          if (t > p.getLong(maxEventTimeOrdinal)) p.setLong(maxEventTimeOrdinal, t)
          if (latenessOrdinal >= 0) {
            val l = row.getLong(columns.lateness)
            if (l > p.getLong(latenessOrdinal)) p.setLong(latenessOrdinal, l)
          }
          if (sessionEndOrdinal >= 0) {
            val end = row.getLong(columns.sessionEnd)
            if (end > p.getLong(sessionEndOrdinal)) p.setLong(sessionEndOrdinal, end)
          }
          w += 1
        }
      }
    }
    flushed.iterator ++ drain(map)
  }

  /** The map's partials as output rows (each reused by the next); frees the map at the end. */
  private def drain(m: UnsafeFixedWidthAggregationMap): Iterator[InternalRow] = new Iterator[InternalRow] {
    private val entries = m.iterator()
    private var ready = entries.next()
    if (!ready) m.free()

    override def hasNext: Boolean = ready

    override def next(): InternalRow = {
      val key = entries.getKey
      val value = entries.getValue
      val row = out(key, key.getLong(columns.keyCount), value.getLong(rowsOrdinal), UnsafeRowBytes.bytes(value))
      ready = entries.next()
      if (!ready) m.free()
      row
    }
  }
}
