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
import io.github.keyedwatermarks.window.{SessionWindows, WindowAssigner}

/** Everything the operator needs, fixed when the query is defined (serialized to executors). */
final case class OperatorPlan(
    keySchema: StructType,
    partialSchema: StructType,
    windows: WindowAssigner,
    latenessMicros: Long,
    allowedLatenessMicros: Long,
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
  @transient private lazy val windowStates = new RowConverter(KeyState.windowSchema(agg.bufferSchema))
  private val revisionOrdinal = agg.bufferSchema.length
  private def agg = plan.aggregation

  // A window is due (fires revision 0) when the key's watermark passes its end, and expires
  // (leaves state; its rows become late) when the watermark passes end + allowed lateness.
  private def due(start: Long, wm: Long) = LateRowPolicy.isClosed(plan.windows.windowEnd(start), wm)
  private def expired(start: Long, wm: Long) =
    LateRowPolicy.isClosed(plan.windows.windowEnd(start) + plan.allowedLatenessMicros, wm)

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    state = new KeyState(getHandle, agg.bufferSchema)
  }

  /** A window in this batch: its live buffer, the revisions fired before, whether it was stored. */
  private final class OpenWindow(val buffer: InternalRow, var revisions: Int, val stored: Boolean, var end: Long)

  private def load(stored: Row): OpenWindow = {
    val row = windowStates.toInternal(stored)
    new OpenWindow(agg.fromStored(row), row.getInt(revisionOrdinal), stored = true, row.getLong(revisionOrdinal + 1))
  }

  private def store(start: Long, window: OpenWindow): Unit =
    state.openWindows.updateValue(start, windowStates.toExternal(
      new JoinedRow(agg.toStored(window.buffer), InternalRow(window.revisions, window.end))))

  override def handleInputRows(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    val out = plan.windows match {
      case _: SessionWindows => handleSessions(key, rows)
      case _ => handleFixedWindows(key, rows)
    }
    plan.idleTimeoutMillis.foreach { timeout =>
      getHandle.listTimers().foreach(t => getHandle.deleteTimer(t))
      getHandle.registerTimer(timerValues.getCurrentProcessingTimeInMs() + timeout)
    }
    out
  }

  /** Emits a kept late row per original row of a late partial. */
  private def keptLateRows(partial: InternalRow, keyValues: InternalRow, watermark: Long, out: mutable.ArrayBuffer[Row]): Unit =
    if (plan.keepLateRows) {
      val kept = partial.getArray(keptOrdinal)
      var i = 0
      while (i < kept.numElements()) {
        out += plan.emitter.lateRow(keyValues, kept.getStruct(i, keptWidth), watermark)
        i += 1
      }
    }

  /**
   * Session windows: partials are per (key, event time), i.e. a row's own interval
   * [t, t + gap). A row is late when t <= the key's watermark at the start of the batch (so an
   * on-time row can never touch an already emitted session). On-time intervals and the key's
   * open sessions are merged where they touch (start <= end of the previous), and a session
   * is emitted once when the key's watermark passes its end.
   */
  private def handleSessions(key: Row, rows: Iterator[Row]): Iterator[Row] = {
    val (storedMax, lateSoFar) = state.loadWatermark()
    val watermark = new KeyWatermark(plan.latenessMicros, storedMax)
    val watermarkAtStart = watermark.current
    val keyValues = keys.toInternal(key).copy()
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    var late = 0L
    // (start, end, stored-form buffer, start in state or -1 for a new interval)
    val intervals = mutable.ArrayBuffer.empty[(Long, Long, InternalRow, Boolean)]
    while (rows.hasNext) {
      val partial = partials.toInternal(rows.next())
      val start = partial.getLong(startOrdinal)
      watermark.observe(partial.getLong(startOrdinal + 2))
      if (LateRowPolicy.isClosed(start, watermarkAtStart)) {
        late += partial.getLong(startOrdinal + 1)
        keptLateRows(partial, keyValues, watermarkAtStart, lateRowsOut)
      } else {
        intervals += ((start, plan.windows.windowEnd(start), partial.copy(), false))
      }
    }
    state.openWindows.iterator().foreach { case (start, stored) =>
      val row = windowStates.toInternal(stored).copy()
      intervals += ((start.longValue(), row.getLong(revisionOrdinal + 1), row, true))
    }
    val watermarkNow = watermark.current
    val emitted = mutable.ArrayBuffer.empty[Row]
    // Sweep the intervals by start, merging those that touch, as Spark's session_window does.
    val sorted = intervals.sortBy(_._1)
    var i = 0
    while (i < sorted.length) {
      var j = i + 1
      var end = sorted(i)._2
      while (j < sorted.length && sorted(j)._1 <= end) { end = math.max(end, sorted(j)._2); j += 1 }
      val group = sorted.slice(i, j)
      val start = sorted(i)._1
      val changed = group.length > 1 || !group.head._4
      if (changed || LateRowPolicy.isClosed(end, watermarkNow)) {
        val window = new OpenWindow(agg.newBuffer(), 0, stored = false, end)
        group.foreach(g => agg.merge(window.buffer, g._3))
        group.filter(_._4).foreach(g => state.openWindows.removeKey(g._1))
        if (LateRowPolicy.isClosed(end, watermarkNow)) {
          emitted += plan.emitter.window(agg.result(windowGroup(keyValues, start, end), window.buffer), 0, watermarkAtStart)
        } else store(start, window)
      }
      i = j
    }
    state.storeWatermark(watermark.maxEventTimeSeen, lateSoFar + late)
    if (late > 0) {
      emitted.iterator ++ Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
    } else emitted.iterator
  }

  private def handleFixedWindows(key: Row, rows: Iterator[Row]): Iterator[Row] = {
    val (storedMax, lateSoFar) = state.loadWatermark()
    val watermark = new KeyWatermark(plan.latenessMicros, storedMax)
    val watermarkAtStart = watermark.current

    // Window start -> the window, loaded from state on its first partial in this batch, so the
    // state store is read at most once per (key, window) and batch.
    val touched = mutable.LongMap.empty[OpenWindow]
    def open(start: Long): OpenWindow = {
      val previous = state.openWindows.getValue(start)
      if (previous == null) new OpenWindow(agg.newBuffer(), 0, stored = false, plan.windows.windowEnd(start))
      else load(previous)
    }
    var late = 0L
    val keyValues = keys.toInternal(key).copy()
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    while (rows.hasNext) {
      val partial = partials.toInternal(rows.next())
      val start = partial.getLong(startOrdinal)
      watermark.observe(partial.getLong(startOrdinal + 2))
      if (expired(start, watermarkAtStart)) {
        late += partial.getLong(startOrdinal + 1)
        keptLateRows(partial, keyValues, watermarkAtStart, lateRowsOut)
      } else {
        agg.merge(touched.getOrElseUpdate(start, open(start)).buffer,
          if (agg.retainsInputReferences) partial.copy() else partial)
      }
    }

    val watermarkNow = watermark.current
    val emitted = mutable.ArrayBuffer.empty[(Long, Int, Row)]
    def emit(start: Long, window: OpenWindow): Unit = {
      emitted += ((start, window.revisions, plan.emitter.window(
        agg.result(windowGroup(keyValues, start, window.end), window.buffer), window.revisions, watermarkAtStart)))
      window.revisions += 1
    }

    // Windows this batch updated: first firing when due; with allowed lateness, a window that
    // already fired and got more rows fires again as the next revision.
    touched.foreachEntry { (start, window) =>
      if (window.revisions > 0 || due(start, watermarkNow)) emit(start, window)
      if (expired(start, watermarkNow)) {
        if (window.stored) state.openWindows.removeKey(start)
      } else store(start, window)
    }
    // Windows from earlier batches that this batch's watermark advance makes due or expired.
    if (watermarkNow != watermarkAtStart) {
      val affected = state.openWindows.keys().map(_.longValue()).filter { start =>
        !touched.contains(start) && due(start, watermarkNow)
      }.toList
      affected.foreach { start =>
        val stored = state.openWindows.getValue(start)
        val revisions = windowStates.toInternal(stored).getInt(revisionOrdinal)
        if (revisions == 0) {
          val window = load(stored)
          emit(start, window)
          if (!expired(start, watermarkNow)) store(start, window)
        }
        if (expired(start, watermarkNow)) state.openWindows.removeKey(start)
      }
    }

    state.storeWatermark(watermark.maxEventTimeSeen, lateSoFar + late)

    val windowsOut = emitted.sortBy(e => (e._1, e._2)).iterator.map(_._3)
    if (late > 0) {
      windowsOut ++ Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
    } else windowsOut
  }

  /** Idle key: emit its windows that have not fired yet, and forget the key. */
  override def handleExpiredTimer(
      key: Row, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo): Iterator[Row] = {
    val (storedMax, _) = state.loadWatermark()
    val watermark = new KeyWatermark(plan.latenessMicros, storedMax).current
    val keyValues = keys.toInternal(key).copy()
    val out = state.openWindows.iterator().toList.sortBy(_._1.longValue()).flatMap { case (start, stored) =>
      val window = load(stored)
      if (window.revisions > 0) None
      else Some(plan.emitter.window(
        agg.result(windowGroup(keyValues, start.longValue(), window.end), window.buffer), 0, watermark))
    }
    state.clear()
    out.iterator
  }

  /** Grouping values as Spark's Aggregate lays them out: the key columns, then the window struct. */
  private def windowGroup(keyValues: InternalRow, start: Long, end: Long): InternalRow =
    new JoinedRow(keyValues, InternalRow(InternalRow(start, end)))
}
