package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.JoinedRow
import org.apache.spark.sql.streaming.{ExpiredTimerInfo, OutputMode, StatefulProcessor, TimeMode, TimerValues}
import org.apache.spark.sql.types.{ArrayType, StructType}

import io.github.keyedwatermarks.compat.CatalystAggregation
import io.github.keyedwatermarks.compat.SparkInternals.RowConverter
import io.github.keyedwatermarks.emission.WindowEmitter
import io.github.keyedwatermarks.state.KeyState
import io.github.keyedwatermarks.watermark.{KeyWatermark, LateRowPolicy}
import io.github.keyedwatermarks.window.WindowAssigner

/** Everything the operator needs, fixed when the query is defined (serialized to executors). */
final case class OperatorPlan(
    keySchema: StructType,
    partialSchema: StructType,
    windows: WindowAssigner,
    latenessMicros: Long,
    idleTimeoutMillis: Option[Long],
    keepLateRows: Boolean,
    aggregation: CatalystAggregation,
    emitter: WindowEmitter)

/**
 * The keyed-watermark windowed aggregation, run by `transformWithState` (never in EventTime
 * mode, which would drop rows behind Spark's *global* watermark before we see them).
 * Called once per key and micro-batch with the key's partials of that batch (one per input
 * partition and window, see compat.PartialAggregation):
 *  1. lateness is decided against the key's watermark as it stood at the start of the batch,
 *     per (key, window): a partial is wholly late or wholly on time;
 *  2. on-time partials are merged into one live buffer per window touched by the batch;
 *  3. the watermark advances with the batch's rows, then each window it passed is emitted once
 *     and evicted; the others are merged into the state store.
 */
final class KeyedWindowProcessor(plan: OperatorPlan) extends StatefulProcessor[Row, Row, Row] {

  @transient private var state: KeyState = _
  @transient private lazy val keys = new RowConverter(plan.keySchema)
  @transient private lazy val partials = new RowConverter(plan.partialSchema)
  // Partial layout: buffer fields, then window start, row count, max event time (then keys).
  private val startOrdinal = plan.aggregation.bufferSchema.length
  // Kept original rows (if any) are the partial's last column, an array of structs.
  private val keptOrdinal = plan.partialSchema.length - 1
  private val keptWidth = plan.partialSchema.last.dataType match {
    case a: ArrayType => a.elementType.asInstanceOf[StructType].length
    case _ => 0
  }
  @transient private lazy val buffers = new RowConverter(plan.aggregation.bufferSchema)
  private def agg = plan.aggregation

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    state = new KeyState(getHandle, agg.bufferSchema)
  }

  override def handleInputRows(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    val (storedMax, lateSoFar) = state.loadWatermark()
    val watermark = new KeyWatermark(plan.latenessMicros, storedMax)
    val watermarkAtStart = watermark.current

    // Window start -> live buffer of the window, loaded from state on its first row in this
    // batch, so the state store is read at most once per (key, window) and batch.
    val touched = mutable.LongMap.empty[InternalRow]
    val stored = mutable.LongMap.empty[Boolean]
    def open(start: Long): InternalRow = {
      val previous = state.openWindows.getValue(start)
      stored(start) = previous != null
      if (previous == null) agg.newBuffer() else agg.fromStored(buffers.toInternal(previous))
    }
    var late = 0L
    val keyValues = keys.toInternal(key).copy()
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    while (rows.hasNext) {
      val partial = partials.toInternal(rows.next())
      val start = partial.getLong(startOrdinal)
      watermark.observe(partial.getLong(startOrdinal + 2))
      if (LateRowPolicy.isClosed(plan.windows.windowEnd(start), watermarkAtStart)) {
        late += partial.getLong(startOrdinal + 1)
        if (plan.keepLateRows) {
          val kept = partial.getArray(keptOrdinal)
          var i = 0
          while (i < kept.numElements()) {
            lateRowsOut += plan.emitter.lateRow(keyValues, kept.getStruct(i, keptWidth), watermarkAtStart)
            i += 1
          }
        }
      } else {
        agg.merge(touched.getOrElseUpdate(start, open(start)),
          if (agg.retainsInputReferences) partial.copy() else partial)
      }
    }

    val watermarkNow = watermark.current
    val emitted = mutable.ArrayBuffer.empty[(Long, Row)]
    def emit(start: Long, buffer: InternalRow): Unit = emitted += start -> plan.emitter.window(
      agg.result(windowGroup(keyValues, start), buffer), watermarkAtStart)

    touched.foreachEntry { (start, buffer) =>
      if (LateRowPolicy.isClosed(plan.windows.windowEnd(start), watermarkNow)) {
        emit(start, buffer)
        if (stored(start)) state.openWindows.removeKey(start)
      } else {
        state.openWindows.updateValue(start, buffers.toExternal(agg.toStored(buffer)))
      }
    }
    // Windows buffered in earlier batches that this batch's watermark advance closes.
    if (watermarkNow != watermarkAtStart) {
      val closing = state.openWindows.keys().map(_.longValue()).filter { start =>
        !touched.contains(start) && LateRowPolicy.isClosed(plan.windows.windowEnd(start), watermarkNow)
      }.toList
      closing.foreach { start =>
        emit(start, agg.fromStored(buffers.toInternal(state.openWindows.getValue(start))))
        state.openWindows.removeKey(start)
      }
    }

    state.storeWatermark(watermark.maxEventTimeSeen, lateSoFar + late)
    plan.idleTimeoutMillis.foreach { timeout =>
      getHandle.listTimers().foreach(t => getHandle.deleteTimer(t))
      getHandle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + timeout)
    }

    val windowsOut = emitted.sortBy(_._1).iterator.map(_._2)
    if (late > 0) {
      windowsOut ++ Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
    } else windowsOut
  }

  /** Idle key: emit all of its open windows and forget the key. */
  override def handleExpiredTimer(
      key: Row, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo): Iterator[Row] = {
    val (storedMax, _) = state.loadWatermark()
    val watermark = new KeyWatermark(plan.latenessMicros, storedMax).current
    val keyValues = keys.toInternal(key).copy()
    val out = state.openWindows.iterator().toList.sortBy(_._1.longValue()).map { case (start, stored) =>
      plan.emitter.window(
        agg.result(windowGroup(keyValues, start), agg.fromStored(buffers.toInternal(stored))), watermark)
    }
    state.clear()
    out.iterator
  }

  /** Grouping values as Spark's Aggregate lays them out: the key columns, then the window struct. */
  private def windowGroup(keyValues: InternalRow, start: Long): InternalRow =
    new JoinedRow(keyValues, InternalRow(InternalRow(start, plan.windows.windowEnd(start))))
}
