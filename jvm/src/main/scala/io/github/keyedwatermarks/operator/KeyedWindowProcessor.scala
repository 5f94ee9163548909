package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.JoinedRow
import org.apache.spark.sql.streaming.{ExpiredTimerInfo, OutputMode, StatefulProcessor, TimeMode, TimerValues}
import org.apache.spark.sql.types.StructType

import io.github.keyedwatermarks.compat.{CatalystAggregation, UnsafeRowBytes}
import io.github.keyedwatermarks.compat.SparkInternals.RowConverter
import io.github.keyedwatermarks.emission.WindowEmitter
import io.github.keyedwatermarks.state.KeyState
import io.github.keyedwatermarks.watermark.{KeyWatermark, LateRowPolicy, WatermarkPolicy}
import io.github.keyedwatermarks.window.{SessionWindows, SlidingWindows, TumblingWindows, WindowAssigner}

/** Everything the operator needs, fixed when the query is defined (serialized to executors). */
final case class OperatorPlan(
    keySchema: StructType,
    /** Schema of a partial's payload (see compat.PartialAggregation). */
    payloadSchema: StructType,
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
  private val layout = PartialLayout(plan.payloadSchema)
  private val payloadFields = plan.payloadSchema.length
  private val startOrdinal = layout.windowStart
  private val revisionOrdinal = agg.bufferSchema.length
  private def agg = plan.aggregation
  private def policy = plan.policy

  // A window is due (fires revision 0) when the key's watermark passes its end, and expires
  // (leaves state; its rows become late) when the watermark passes end + allowed lateness.
  private def due(window: OpenWindow, wm: Long) = LateRowPolicy.isClosed(window.end, wm)
  private def expired(window: OpenWindow, wm: Long) = LateRowPolicy.isClosed(window.end + plan.allowedLatenessMicros, wm)
  private def expiredStart(start: Long, wm: Long) =
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

  /**
   * An open window of the key: its live buffer, the revisions it fired, its bounds, and
   * whether it changed since it last fired (a session that late rows merged into and extended
   * past the watermark fires again when due).
   */
  private final class OpenWindow(
      val start: Long, val end: Long, val buffer: InternalRow, var revisions: Int, var dirty: Boolean = false) {
    /** The watermark at which it next changes: fires (first or again) or expires. */
    def threshold: Long = if (revisions == 0 || dirty) end else end + plan.allowedLatenessMicros
  }

  /** The key's values as an InternalRow; a copy, since the converter reuses its output row. */
  private def keyValues(key: Row): InternalRow = keys.toInternal(key).copy()

  /**
   * A partial's payload (its first column) as a row, over its own bytes: merged buffers may
   * keep references into them.
   */
  private def partial(value: Row): InternalRow = UnsafeRowBytes.row(value.getAs[Array[Byte]](0), payloadFields)

  /** One key's state for one batch or timer: watermark record and open windows by start. */
  private final class KeyBatch(timerValues: TimerValues) {
    private val (record, stored) = state.load()
    val update = new KeyWatermarkUpdate(policy, state, record, layout, timerValues.getCurrentProcessingTimeInMs(),
      globalWatermark(timerValues))
    val windows = mutable.LongMap.empty[OpenWindow]
    stored.foreach { row =>
      val start = row.getLong(revisionOrdinal + 2)
      windows.update(start, new OpenWindow(start, row.getLong(revisionOrdinal + 1), agg.fromStored(row),
        row.getInt(revisionOrdinal), row.getBoolean(revisionOrdinal + 3)))
    }

    def window(start: Long): OpenWindow =
      windows.getOrElseUpdate(start, new OpenWindow(start, plan.windows.windowEnd(start), agg.newBuffer(), 0))

    /** Writes the record and the windows still open: one state store write for the key. */
    def store(lateRows: Long): Unit = {
      record.lateRows += lateRows
      state.store(record, windows.values.iterator.map { w =>
        new JoinedRow(agg.toStored(w.buffer), InternalRow(w.revisions, w.end, w.start, w.dirty))
      })
    }
  }

  override def handleInputRows(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    val batch = new KeyBatch(timerValues)
    val keyValues = this.keyValues(key)
    val out = plan.windows match {
      case _: SessionWindows => handleSessions(keyValues, rows, batch)
      case _: TumblingWindows | _: SlidingWindows => handleFixedWindows(keyValues, rows, batch)
    }
    val update = batch.update
    val held =
      if (update.regressed) Iterator.single(plan.emitter.heldWatermark(keyValues, update.record.regressions, update.atStart))
      else Iterator.empty
    scheduleTimer(batch, timerValues)
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
   * [t, t + gap). A row is late when t <= the key's watermark at the start of the batch minus
   * the allowed lateness A (so an on-time row can never touch a session that already left
   * state: that needs end + A <= wm, and an on-time row's t > wm - A would have to be <= end).
   * On-time intervals and the key's open sessions are merged where they touch (start <= end of
   * the previous); a session fires when the key's watermark passes its end, and again (next
   * revision) whenever it changed since and is due; it leaves state when end + A <= wm.
   */
  private def handleSessions(keyValues: InternalRow, rows: Iterator[Row], batch: KeyBatch): Iterator[Row] = {
    val update = batch.update
    val watermarkAtStart = update.atStart
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    var late = 0L
    val intervals = mutable.ArrayBuffer.empty[OpenWindow]
    while (rows.hasNext) {
      val partial = this.partial(rows.next())
      val start = partial.getLong(startOrdinal)
      update.observe(partial)
      if (LateRowPolicy.isClosed(start + plan.allowedLatenessMicros, watermarkAtStart)) {
        late += partial.getLong(layout.rows)
        keptLateRows(partial, keyValues, watermarkAtStart, lateRowsOut)
      } else {
        val end = if (layout.sessionEnd >= 0) partial.getLong(layout.sessionEnd) else plan.windows.windowEnd(start)
        val interval = new OpenWindow(start, end, agg.newBuffer(), 0, dirty = true)
        agg.merge(interval.buffer, partial)
        intervals += interval
      }
    }
    val emitted = closeSessions(keyValues, batch, intervals, update.finish(), watermarkAtStart)
    batch.store(late)
    if (late > 0) {
      emitted.iterator ++ Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
    } else emitted.iterator
  }

  /** Merges new intervals with the key's open sessions; emits those closed by `watermarkNow`. */
  private def closeSessions(
      keyValues: InternalRow,
      batch: KeyBatch,
      intervals: mutable.ArrayBuffer[OpenWindow],
      watermarkNow: Long,
      watermarkAtStart: Long): mutable.ArrayBuffer[Row] = {
    // Sweep the key's sessions and the new intervals by start, merging those that touch, as
    // Spark's session_window does.
    val sorted = (batch.windows.values ++ intervals).toArray.sortBy(_.start)
    batch.windows.clear()
    val emitted = mutable.ArrayBuffer.empty[Row]
    var i = 0
    while (i < sorted.length) {
      var j = i + 1
      var end = sorted(i).end
      while (j < sorted.length && sorted(j).start <= end) { end = math.max(end, sorted(j).end); j += 1 }
      val start = sorted(i).start
      val session =
        if (j == i + 1) sorted(i)
        else {
          // A merge continues the revisions of the sessions it joins.
          val parts = sorted.slice(i, j)
          val merged = new OpenWindow(start, end, agg.newBuffer(), parts.map(_.revisions).max, parts.exists(_.dirty))
          parts.foreach(p => agg.merge(merged.buffer, agg.toStored(p.buffer).copy()))
          merged
        }
      if (LateRowPolicy.isClosed(end, watermarkNow) && (session.revisions == 0 || session.dirty)) {
        emitted += plan.emitter.window(agg.result(windowGroup(keyValues, start, end), session.buffer),
          session.revisions, watermarkAtStart)
        session.revisions += 1
        session.dirty = false
      }
      if (!LateRowPolicy.isClosed(end + plan.allowedLatenessMicros, watermarkNow)) batch.windows.update(start, session)
      i = j
    }
    emitted
  }

  private def handleFixedWindows(keyValues: InternalRow, rows: Iterator[Row], batch: KeyBatch): Iterator[Row] = {
    val update = batch.update
    val watermarkAtStart = update.atStart
    val touched = mutable.LongMap.empty[Boolean]
    var late = 0L
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    while (rows.hasNext) {
      val partial = this.partial(rows.next())
      val start = partial.getLong(startOrdinal)
      update.observe(partial)
      if (expiredStart(start, watermarkAtStart)) {
        late += partial.getLong(layout.rows)
        keptLateRows(partial, keyValues, watermarkAtStart, lateRowsOut)
      } else {
        agg.merge(batch.window(start).buffer, partial)
        touched.update(start, true)
      }
    }
    val emitted = closeWindows(keyValues, batch, update.finish(), watermarkAtStart, touched.contains)
    batch.store(late)
    if (late > 0) {
      emitted.iterator ++ Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
    } else emitted.iterator
  }

  /**
   * Fires and evicts the key's windows for `watermarkNow`, in window order: a window fires its
   * first revision when due; with allowed lateness a window that already fired and got rows in
   * this batch (`touched`) fires again as the next revision; expired windows leave state.
   */
  private def closeWindows(
      keyValues: InternalRow, batch: KeyBatch, watermarkNow: Long, reportedWatermark: Long,
      touched: Long => Boolean): Seq[Row] = {
    val out = mutable.ArrayBuffer.empty[Row]
    batch.windows.values.toArray.sortBy(_.start).foreach { window =>
      if ((window.revisions > 0 && touched(window.start)) || (window.revisions == 0 && due(window, watermarkNow))) {
        out += plan.emitter.window(agg.result(windowGroup(keyValues, window.start, window.end), window.buffer),
          window.revisions, reportedWatermark)
        window.revisions += 1
      }
      if (expired(window, watermarkNow)) batch.windows.remove(window.start)
    }
    out.toSeq
  }

  /**
   * A timer: with idle_timeout (and not advance_when_idle) an idle key's windows that have not
   * fired yet are emitted and the key is forgotten; otherwise the key's watermark follows its
   * clock (processing time, idle advance, a source turning idle, Spark's global watermark) and
   * the windows it passes are emitted.
   */
  override def handleExpiredTimer(
      key: Row, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo): Iterator[Row] = {
    val keyValues = this.keyValues(key)
    val batch = new KeyBatch(timerValues)
    val update = batch.update
    val now = timerValues.getCurrentProcessingTimeInMs()
    val idle = policy.idleTimeoutMillis.exists(t => update.record.lastArrivalMs != KeyWatermark.NoArrival &&
      now - update.record.lastArrivalMs >= t)
    if (idle && !policy.advanceWhenIdle) {
      // Unfired windows, and sessions that changed since they fired (their next revision).
      val out = batch.windows.values.toSeq.sortBy(_.start).filter(w => w.revisions == 0 || w.dirty).map { w =>
        plan.emitter.window(agg.result(windowGroup(keyValues, w.start, w.end), w.buffer), w.revisions, update.atStart)
      }
      state.clear()
      getHandle.listTimers().foreach(t => getHandle.deleteTimer(t))
      return out.iterator
    }
    val watermarkAtStart = update.atStart
    val watermarkNow = update.finish()
    val out = plan.windows match {
      case _: SessionWindows => closeSessions(keyValues, batch, mutable.ArrayBuffer.empty, watermarkNow, watermarkAtStart).toSeq
      case _: TumblingWindows | _: SlidingWindows =>
        closeWindows(keyValues, batch, watermarkNow, watermarkAtStart, _ => false)
    }
    batch.store(0L)
    scheduleTimer(batch, timerValues)
    out.iterator
  }

  /**
   * Registers the key's next timer (only for policies that follow a clock): when the key turns
   * idle, when a source turns idle, or when the clock will close the key's earliest open window.
   */
  private def scheduleTimer(batch: KeyBatch, timerValues: TimerValues): Unit = {
    if (!policy.usesProcessingTimers && !policy.usesGlobalWatermark) return
    val handle = getHandle
    handle.listTimers().foreach(t => handle.deleteTimer(t))
    val record = batch.update.record
    // The watermark at which the earliest open window next changes (fires or expires).
    val next = if (batch.windows.isEmpty) None else Some(batch.windows.values.map(_.threshold).min)
    val sourceIdle = batch.update.sourceIdleTimes
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
      times ++= sourceIdle
      for (i <- times.indices) if (times(i) <= now) times(i) = now + 1
    }
    if (times.nonEmpty) handle.registerTimer(times.min)
  }

  /** Grouping values as Spark's Aggregate lays them out: the key columns, then the window struct. */
  private def windowGroup(keyValues: InternalRow, start: Long, end: Long): InternalRow =
    new JoinedRow(keyValues, InternalRow(InternalRow(start, end)))
}
