package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.JoinedRow
import org.apache.spark.sql.streaming.{ExpiredTimerInfo, OutputMode, StatefulProcessor, TimeMode, TimerValues}
import org.apache.spark.sql.types.StructType

import io.github.keyedwatermarks.compat.CatalystAggregation
import io.github.keyedwatermarks.compat.SparkInternals.RowConverter
import io.github.keyedwatermarks.emission.WindowEmitter
import io.github.keyedwatermarks.state.KeyState
import io.github.keyedwatermarks.watermark.{KeyWatermark, LateRowPolicy, WatermarkPolicy}
import io.github.keyedwatermarks.window.{SessionWindows, WindowAssigner}

/** Everything the operator needs, fixed when the query is defined (serialized to executors). */
final case class OperatorPlan(
    keySchema: StructType,
    partialSchema: StructType,
    windows: WindowAssigner,
    policy: WatermarkPolicy,
    allowedLatenessMicros: Long,
    keepLateRows: Boolean,
    aggregation: CatalystAggregation,
    emitter: WindowEmitter)

/**
 * The keyed-watermark windowed aggregation, run by `transformWithState` (never with Spark
 * dropping rows behind its *global* watermark: our partials carry no watermark column).
 * Called once per key and micro-batch with the key's partials of that batch (one per input
 * partition and window, see compat.PartialAggregation):
 *  1. lateness is decided against the key's watermark as it stood at the start of the batch,
 *     per (key, window): a partial is wholly late or wholly on time;
 *  2. on-time partials are merged into one live buffer per window touched by the batch;
 *  3. the watermark advances (its policy: see watermark.WatermarkPolicy), then each window it
 *     passed is emitted once and evicted; the others are merged into the state store.
 * Timers (only for policies that follow a clock) close windows of keys that receive no rows.
 */
final class KeyedWindowProcessor(plan: OperatorPlan) extends StatefulProcessor[Row, Row, Row] {

  @transient private var state: KeyState = _
  @transient private lazy val keys = new RowConverter(plan.keySchema)
  @transient private lazy val partials = new RowConverter(plan.partialSchema)
  private val layout = PartialLayout(plan.partialSchema)
  private val startOrdinal = layout.windowStart
  @transient private lazy val windowStates = new RowConverter(KeyState.windowSchema(agg.bufferSchema))
  private val revisionOrdinal = agg.bufferSchema.length
  private def agg = plan.aggregation
  private def policy = plan.policy

  // A window is due (fires revision 0) when the key's watermark passes its end, and expires
  // (leaves state; its rows become late) when the watermark passes end + allowed lateness.
  private def due(start: Long, wm: Long) = LateRowPolicy.isClosed(plan.windows.windowEnd(start), wm)
  private def expired(start: Long, wm: Long) =
    LateRowPolicy.isClosed(plan.windows.windowEnd(start) + plan.allowedLatenessMicros, wm)

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    state = new KeyState(getHandle, agg.bufferSchema, policy)
  }

  /** Spark's global watermark in microseconds (only with max_skew / closing='global'). */
  private def globalWatermark(timerValues: TimerValues): Long =
    if (!policy.usesGlobalWatermark) KeyWatermark.Undefined
    else {
      val ms = timerValues.getCurrentWatermarkInMs()
      if (ms <= 0) KeyWatermark.Undefined else ms * 1000L
    }

  private def begin(timerValues: TimerValues) = new KeyWatermarkUpdate(
    policy, state, layout, timerValues.getCurrentProcessingTimeInMs(), globalWatermark(timerValues))

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
    val update = begin(timerValues)
    val keyValues = keys.toInternal(key).copy()
    val out = plan.windows match {
      case _: SessionWindows => handleSessions(keyValues, rows, update)
      case _ => handleFixedWindows(keyValues, rows, update)
    }
    val held =
      if (update.regressed) Iterator.single(plan.emitter.heldWatermark(keyValues, update.record.regressions, update.atStart))
      else Iterator.empty
    scheduleTimer(update, timerValues)
    out ++ held
  }

  /** Emits a kept late row per original row of a late partial. */
  private def keptLateRows(partial: InternalRow, keyValues: InternalRow, watermark: Long, out: mutable.ArrayBuffer[Row]): Unit =
    if (plan.keepLateRows) {
      val kept = partial.getArray(layout.kept)
      var i = 0
      while (i < kept.numElements()) {
        out += plan.emitter.lateRow(keyValues, kept.getStruct(i, layout.keptWidth), watermark)
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
  private def handleSessions(keyValues: InternalRow, rows: Iterator[Row], update: KeyWatermarkUpdate): Iterator[Row] = {
    val watermarkAtStart = update.atStart
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    var late = 0L
    // (start, end, stored-form buffer, start in state or -1 for a new interval)
    val intervals = mutable.ArrayBuffer.empty[(Long, Long, InternalRow, Boolean)]
    while (rows.hasNext) {
      val partial = partials.toInternal(rows.next())
      val start = partial.getLong(startOrdinal)
      update.observe(partial)
      if (LateRowPolicy.isClosed(start, watermarkAtStart)) {
        late += partial.getLong(layout.rows)
        keptLateRows(partial, keyValues, watermarkAtStart, lateRowsOut)
      } else {
        intervals += ((start, plan.windows.windowEnd(start), partial.copy(), false))
      }
    }
    val emitted = closeSessions(keyValues, intervals, update.finish(), watermarkAtStart)
    update.store(late)
    if (late > 0) {
      emitted.iterator ++ Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
    } else emitted.iterator
  }

  /** Merges new intervals with the key's open sessions; emits those closed by `watermarkNow`. */
  private def closeSessions(
      keyValues: InternalRow,
      intervals: mutable.ArrayBuffer[(Long, Long, InternalRow, Boolean)],
      watermarkNow: Long,
      watermarkAtStart: Long): mutable.ArrayBuffer[Row] = {
    state.openWindows.iterator().foreach { case (start, stored) =>
      val row = windowStates.toInternal(stored).copy()
      intervals += ((start.longValue(), row.getLong(revisionOrdinal + 1), row, true))
    }
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
    emitted
  }

  private def handleFixedWindows(keyValues: InternalRow, rows: Iterator[Row], update: KeyWatermarkUpdate): Iterator[Row] = {
    val watermarkAtStart = update.atStart

    // Window start -> the window, loaded from state on its first partial in this batch, so the
    // state store is read at most once per (key, window) and batch.
    val touched = mutable.LongMap.empty[OpenWindow]
    def open(start: Long): OpenWindow = {
      val previous = state.openWindows.getValue(start)
      if (previous == null) new OpenWindow(agg.newBuffer(), 0, stored = false, plan.windows.windowEnd(start))
      else load(previous)
    }
    var late = 0L
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    while (rows.hasNext) {
      val partial = partials.toInternal(rows.next())
      val start = partial.getLong(startOrdinal)
      update.observe(partial)
      if (expired(start, watermarkAtStart)) {
        late += partial.getLong(layout.rows)
        keptLateRows(partial, keyValues, watermarkAtStart, lateRowsOut)
      } else {
        agg.merge(touched.getOrElseUpdate(start, open(start)).buffer,
          if (agg.retainsInputReferences) partial.copy() else partial)
      }
    }

    val watermarkNow = update.finish()
    val emitted = mutable.ArrayBuffer.empty[(Long, Int, Row)]
    // Windows this batch updated: first firing when due; with allowed lateness, a window that
    // already fired and got more rows fires again as the next revision.
    touched.foreachEntry { (start, window) =>
      if (window.revisions > 0 || due(start, watermarkNow)) emitted += emit(keyValues, start, window, watermarkAtStart)
      if (expired(start, watermarkNow)) {
        if (window.stored) state.openWindows.removeKey(start)
      } else store(start, window)
    }
    if (watermarkNow != watermarkAtStart) emitted ++= closeStoredWindows(keyValues, watermarkNow, watermarkAtStart, touched.contains)
    update.store(late)

    val windowsOut = emitted.sortBy(e => (e._1, e._2)).iterator.map(_._3)
    if (late > 0) {
      windowsOut ++ Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
    } else windowsOut
  }

  private def emit(keyValues: InternalRow, start: Long, window: OpenWindow, reportedWatermark: Long): (Long, Int, Row) = {
    val row = (start, window.revisions, plan.emitter.window(
      agg.result(windowGroup(keyValues, start, window.end), window.buffer), window.revisions, reportedWatermark))
    window.revisions += 1
    row
  }

  /** Stored windows (not touched by this batch) that the watermark's advance makes due or expired. */
  private def closeStoredWindows(
      keyValues: InternalRow, watermarkNow: Long, reportedWatermark: Long, touched: Long => Boolean): Seq[(Long, Int, Row)] = {
    val affected = state.openWindows.keys().map(_.longValue()).filter { start =>
      !touched(start) && due(start, watermarkNow)
    }.toList
    affected.flatMap { start =>
      val stored = state.openWindows.getValue(start)
      val revisions = windowStates.toInternal(stored).getInt(revisionOrdinal)
      val out = if (revisions == 0) {
        val window = load(stored)
        val row = emit(keyValues, start, window, reportedWatermark)
        if (!expired(start, watermarkNow)) store(start, window)
        Some(row)
      } else None
      if (expired(start, watermarkNow)) state.openWindows.removeKey(start)
      out
    }
  }

  /**
   * A timer: with idle_timeout (and not advance_when_idle) an idle key's windows that have not
   * fired yet are emitted and the key is forgotten; otherwise the key's watermark follows its
   * clock (processing time, idle advance, a source turning idle, Spark's global watermark) and
   * the windows it passes are emitted.
   */
  override def handleExpiredTimer(
      key: Row, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo): Iterator[Row] = {
    val keyValues = keys.toInternal(key).copy()
    val update = begin(timerValues)
    val now = timerValues.getCurrentProcessingTimeInMs()
    val idle = policy.idleTimeoutMillis.exists(t => update.record.lastArrivalMs != KeyWatermark.NoArrival &&
      now - update.record.lastArrivalMs >= t)
    if (idle && !policy.advanceWhenIdle) {
      val watermark = update.atStart
      val out = state.openWindows.iterator().toList.sortBy(_._1.longValue()).flatMap { case (start, stored) =>
        val window = load(stored)
        if (window.revisions > 0) None
        else Some(plan.emitter.window(
          agg.result(windowGroup(keyValues, start.longValue(), window.end), window.buffer), 0, watermark))
      }
      state.clear()
      getHandle.listTimers().foreach(t => getHandle.deleteTimer(t))
      return out.iterator
    }
    val watermarkAtStart = update.atStart
    val watermarkNow = update.finish()
    val out = plan.windows match {
      case _: SessionWindows => closeSessions(keyValues, mutable.ArrayBuffer.empty, watermarkNow, watermarkAtStart).toSeq
      case _ => closeStoredWindows(keyValues, watermarkNow, watermarkAtStart, _ => false).sortBy(e => (e._1, e._2)).map(_._3)
    }
    update.store(0L)
    scheduleTimer(update, timerValues)
    out.iterator
  }

  /**
   * Registers the key's next timer (only for policies that follow a clock): when the key turns
   * idle, when a source turns idle, or when the clock will close the key's earliest open window.
   */
  private def scheduleTimer(update: KeyWatermarkUpdate, timerValues: TimerValues): Unit = {
    if (!policy.usesProcessingTimers && !policy.usesGlobalWatermark) return
    val handle = getHandle
    handle.listTimers().foreach(t => handle.deleteTimer(t))
    val record = update.record
    // The watermark at which the earliest open window next changes (fires or expires).
    val thresholds = state.openWindows.iterator().map { case (start, stored) =>
      val row = windowStates.toInternal(stored)
      val end = row.getLong(revisionOrdinal + 1)
      if (row.getInt(revisionOrdinal) == 0) end else end + plan.allowedLatenessMicros
    }
    val next = if (thresholds.hasNext) Some(thresholds.min) else None
    val times = mutable.ArrayBuffer.empty[Long]
    if (policy.usesGlobalWatermark) {
      // Event-time timers fire when Spark's global watermark (ms) reaches them.
      next.foreach { t =>
        val global = if (policy.globalClosing) t else t + policy.maxSkewMicros.get
        times += Math.floorDiv(global + 999L, 1000L)
      }
    } else {
      val now = timerValues.getCurrentProcessingTimeInMs()
      val last = record.lastArrivalMs
      policy.idleTimeoutMillis.foreach { timeout =>
        if (last != KeyWatermark.NoArrival) {
          if (!policy.advanceWhenIdle) times += last + timeout
          else next.foreach { t =>
            if (record.arrivalWatermark != KeyWatermark.Undefined) {
              times += last + timeout + Math.floorDiv(t - record.arrivalWatermark + 999L, 1000L)
            }
          }
        }
      }
      if (policy.processingTime) next.foreach(t => times += Math.floorDiv(t + policy.latenessMicros + 999L, 1000L))
      times ++= update.sourceIdleTimes
      val floor = now + 1
      for (i <- times.indices) if (times(i) < floor) times(i) = floor
    }
    if (times.nonEmpty && (next.isDefined || (policy.idleTimeoutMillis.isDefined && !policy.advanceWhenIdle) ||
        update.sourceIdleTimes.nonEmpty)) {
      handle.registerTimer(times.min)
    }
  }

  /** Grouping values as Spark's Aggregate lays them out: the key columns, then the window struct. */
  private def windowGroup(keyValues: InternalRow, start: Long, end: Long): InternalRow =
    new JoinedRow(keyValues, InternalRow(InternalRow(start, end)))
}
