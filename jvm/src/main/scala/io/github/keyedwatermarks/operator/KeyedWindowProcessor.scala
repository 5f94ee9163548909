package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{JoinedRow, UnsafeRow}
import org.apache.spark.sql.streaming.{ExpiredTimerInfo, OutputMode, StatefulProcessor, TimeMode, TimerValues}
import org.apache.spark.sql.types.StructType

import io.github.keyedwatermarks.catalyst.{CatalystAggregation, UnsafeRowBytes}
import io.github.keyedwatermarks.catalyst.SparkInternals.RowConverter
import io.github.keyedwatermarks.partials.PartialLayout
import io.github.keyedwatermarks.emission.{Firing, KeyTally, Pane, WindowEmitter}
import io.github.keyedwatermarks.spec.Emission
import io.github.keyedwatermarks.state.{KeyState, OpenWindowRows, StageRecord, StoredKey}
import io.github.keyedwatermarks.watermark.{
  ClosedWindows, EventTimeClock, HeldWatermark, IdleClockNow, KeyRecord, WatermarkPolicy
}
import io.github.keyedwatermarks.window.{AlignedWindows, SessionWindows, WindowAssigner}

/** Everything the operator needs, fixed when the query is defined (serialized to executors). */
private[keyedwatermarks] final case class OperatorPlan(
    keySchema: StructType,
    /** Schema of a partial's payload (see partials.PartialColumns). */
    payloadSchema: StructType,
    windows: WindowAssigner,
    policy: WatermarkPolicy,
    allowedLatenessMicros: Long,
    keepLateRows: Boolean,
    aggregation: CatalystAggregation,
    emitter: WindowEmitter,
    /** When windows fire and what repeated panes hold (emission.Firing). */
    emission: Emission = Emission.Default,
    /** Per-key deduplication (option `dedup`): partials carry their row's dedup values. */
    dedup: Boolean = false,
    /** The key columns' names in the query (those of `keySchema` are positional). */
    keyNames: Seq[String] = Nil,
    /** Option metrics="keys": every key handled is added to its task's tally (emission.KeyTally). */
    keyMetrics: Boolean = true,
    /** Names this operator's tallies in its tasks (emission.KeyTallyRelay takes them). */
    tallyId: String = "")

/**
 * The keyed-watermark windowed aggregation, run by `transformWithState` (never with Spark
 * dropping rows behind its *global* watermark: our partials carry no watermark column).
 * Called once per key and micro-batch with the key's partials of that batch (one per input
 * partition and window, see partials.PartialColumns):
 *  1. lateness is decided against the key's watermark as it stood at the start of the batch,
 *     per (key, window): a partial is wholly late or wholly on time;
 *  2. on-time partials are merged into one live buffer per window touched by the batch;
 *  3. the watermark advances (its policy: see watermark.WatermarkPolicy), then each window it
 *     passed is emitted once and evicted; the others are merged into the state store.
 * Timers (only for policies that follow a clock) close windows of keys that receive no rows.
 */
private[keyedwatermarks] final class KeyedWindowProcessor(plan: OperatorPlan) extends StatefulProcessor[Row, Row, Row] {

  @transient private var state: KeyState = _
  // The per-key metrics of this task's keys (null with metrics="counts").
  @transient private var tally: KeyTally = _
  @transient private lazy val keys = new RowConverter(plan.keySchema)
  private val layout = PartialLayout(plan.payloadSchema)
  private val payloadFields = plan.payloadSchema.length
  private val startOrdinal = layout.windowStart
  private def agg = plan.aggregation
  private def policy = plan.policy
  // The floors by the clock of their timers (event time: Spark's global watermark; the others
  // follow the wall clock or the arrival clock, whose timers scheduleProcessingTimer sets).
  private val eventTimeFloors = plan.policy.floors.filter(_.clock == EventTimeClock)
  private val processingTimeFloors = plan.policy.floors.filter(_.clock != EventTimeClock)

  // A window is due (fires revision 0) when the key's watermark passes its end, and expires
  // (leaves state; its rows become late) when the watermark passes end + allowed lateness.
  private def due(window: OpenWindow, wm: Long) = ClosedWindows.closedBy(window.end, wm)
  private def expired(window: OpenWindow, wm: Long) =
    ClosedWindows.closedBy(window.end + plan.allowedLatenessMicros, wm)

  /**
   * Whether a partial (rows of one window start) is late against the key's watermark at the
   * start of the batch `wm`: an aligned window is late once it expired; a session row once its
   * own start is (an on-time row can then never touch a session that already left state: that
   * needs end + A <= wm, and an on-time row's t > wm - A would have to be <= end).
   */
  private def isLate(start: Long, wm: Long): Boolean = ClosedWindows.closedBy(lateFrom(start), wm)

  /** The watermark from which a partial starting at `start` is late. */
  private def lateFrom(start: Long): Long = plan.windows match {
    case w: AlignedWindows => w.windowEnd(start) + plan.allowedLatenessMicros
    case _: SessionWindows => start + plan.allowedLatenessMicros
  }

  /**
   * With dedup: whether the partial is a copy of a row the key already has within its horizon
   * (see state.DedupEntries); the row's values are remembered until a row at its time is late.
   */
  private def duplicate(partial: InternalRow, start: Long): Boolean = state.dedupEntries.exists { d =>
    val values = partial.getStruct(layout.dedup, layout.dedupWidth).asInstanceOf[UnsafeRow].getBytes
    d.duplicate(values, partial.getLong(layout.dedupPartition), lateFrom(start))
  }

  /** Sessions whose early panes come before the on-time pane: their state says which fired (OpenWindowRows). */
  private val sessionsWithEarlyPanes = plan.emission.early && (plan.windows match {
    case _: SessionWindows => true
    case _: AlignedWindows => false
  })

  /** emit='every <duration>': a window's early panes at least that much processing time apart. */
  private val spacedPanes = plan.emission.earlyPaneIntervalMs > 0

  /** Whether an early pane of `window` may fire at processing time `nowMs` (emit='every <duration>'). */
  private def spaced(window: OpenWindow, nowMs: Long): Boolean =
    !spacedPanes || window.lastPaneMs == OpenWindowRows.NoPane ||
      nowMs - window.lastPaneMs >= plan.emission.earlyPaneIntervalMs

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    state = new KeyState(getHandle, agg.bufferSchema, policy, plan.windows, previousPaneSchema, plan.dedup,
      onTimeFlag = sessionsWithEarlyPanes, paneTimes = spacedPanes)
    tally = if (plan.keyMetrics) KeyTally.openForTask(plan.tallyId) else null
  }

  private def previousPaneSchema = if (plan.emission.retracting) Some(plan.emitter.aggregateSchema) else None

  /**
   * What this stage's state is written for, as the checkpoint's record of it holds it
   * (state.StageRecord): what the per-key check of KeyState compares, and the key columns.
   */
  def stageRecord(batch: Long): StageRecord = StageRecord.current(KeyState.describe(plan.windows),
    new OpenWindowRows(agg.bufferSchema, previousPaneSchema, sessionsWithEarlyPanes, spacedPanes).schema,
    plan.keyNames.zip(plan.keySchema.fields).map { case (n, f) => s"$n ${f.dataType.simpleString}" }, batch)

  /** Spark's global watermark in microseconds (only with max_skew / closing='global'). */
  private def globalWatermark(timerValues: TimerValues): Long =
    if (!policy.usesGlobalWatermark) HeldWatermark.Undefined
    else {
      val ms = timerValues.getCurrentWatermarkInMs()
      if (ms <= 0) HeldWatermark.Undefined else ms * 1000L
    }

  /**
   * An open window of the key: its live buffer (with accumulation='discarding': the rows since
   * its last pane), the revisions (panes) it fired, its bounds, whether it changed since it last
   * fired (rows merged into it: a window that already fired fires again, as its next revision),
   * whether its on-time pane fired, and with accumulation='retracting' the result of its last
   * pane (null: none yet) and, for a session that merged sessions in this call, the results of
   * their last panes (its next pane withdraws them all).
   */
  private final class OpenWindow(
      val start: Long, val end: Long, var buffer: InternalRow, var revisions: Int, var dirty: Boolean = false,
      var previous: InternalRow = null, var onTimeFired: Boolean = false) {
    var replacedPanes: List[InternalRow] = Nil
    /** The processing time (ms) of its last pane (emit='every <duration>' only). */
    var lastPaneMs: Long = OpenWindowRows.NoPane

    /**
     * The watermark at which it next changes: fires (on time, or again) or expires; `wm` the
     * key's watermark now (a window whose early panes fired is still due at its end).
     */
    def threshold(wm: Long): Long =
      if (revisions == 0 || dirty || !due(this, wm)) end else end + plan.allowedLatenessMicros
  }

  /** The key's values as an InternalRow; a copy, since the converter reuses its output row. */
  private def keyValues(key: Row): InternalRow = keys.toInternal(key).copy()

  /**
   * A partial's payload (its first column) as a row, over its own bytes: merged buffers may
   * keep references into them.
   */
  private def partial(value: Row): InternalRow = UnsafeRowBytes.row(value.getAs[Array[Byte]](0), payloadFields)

  /**
   * One key's state for one batch or timer: watermark record, open windows by start, and the
   * event-time timer registered for it.
   */
  private final class KeyBatch(timerValues: TimerValues) {
    private val loaded: Option[StoredKey] = state.load()
    /** Whether the key had state (false: a new key, or one that returns after leaving state). */
    val existed: Boolean = loaded.isDefined
    private val record = loaded.map(_.record).getOrElse(state.fresh())
    /**
     * The key's watermark as stored by the call before, when every window it passed fired its
     * on-time pane: a window in state that it passes has fired on time (before the floors of
     * this call raise it).
     */
    val watermarkStored: Long = record.watermark
    val windows = mutable.LongMap.empty[OpenWindow]
    loaded.foreach(_.windows.foreach { row =>
      val rows = state.windowRows
      val start = rows.start(row)
      val end = rows.end(row)
      val revisions = rows.revisions(row)
      // An aligned window's end is fixed: it fired on time if it fired and the stored watermark
      // passed it. A session's end moves: with early panes it says so itself; otherwise its
      // first firing is its on-time pane.
      val onTimeFired =
        if (sessionsWithEarlyPanes) rows.onTimeFired(row)
        else plan.windows match {
          case _: AlignedWindows => revisions > 0 && ClosedWindows.closedBy(end, watermarkStored)
          case _: SessionWindows => revisions > 0
        }
      val window = new OpenWindow(start, end, agg.fromStored(row), revisions, rows.dirty(row), rows.previous(row),
        onTimeFired)
      if (spacedPanes) window.lastPaneMs = rows.lastPaneMs(row)
      windows.update(start, window)
    })

    /** Sessions: this batch's on-time intervals, merged with the key's sessions by `close`. */
    val intervals = mutable.ArrayBuffer.empty[OpenWindow]
    /** The event-time timer registered for the key now, if any. */
    var eventTimerMs: Option[Long] = loaded.map(_.eventTimerMs).filter(_ != KeyState.NoTimer)
    val update = new WatermarkAdvance(policy, state, record, layout, IdleClockNow(policy, timerValues),
      globalWatermark(timerValues))
    /** Processing time of the call: the micro-batch's timestamp (constant within the batch). */
    val nowMs: Long = timerValues.getCurrentProcessingTimeInMs()
    /** Whether the key left state in this call. */
    var released = false
    /** Rows dropped as copies (dedup) in this call. */
    var duplicates = 0L

    /** The aligned window starting at `start`, opened if needed. */
    def window(aligned: AlignedWindows, start: Long): OpenWindow =
      windows.getOrElseUpdate(start, new OpenWindow(start, aligned.windowEnd(start), agg.newBuffer(), 0))

    /**
     * Writes the record and the windows still open: one state store write for the key; or,
     * when no window is left and the policy's floor covers a returning key (see
     * WatermarkPolicy.releasesKeysWithoutWindows), removes the key from state.
     */
    def store(lateRows: Long): Unit = {
      record.lateRows += lateRows
      if (windows.isEmpty && policy.releasable(record, IdleClockNow(policy, timerValues),
          globalWatermark(timerValues))) release()
      else {
        state.dedupEntries.foreach(_.flush(record.watermark))
        if (policy.usesGlobalWatermark) placeEventTimer()
        val open = windows.values
        val earliest = if (open.isEmpty) HeldWatermark.Undefined else open.iterator.map(_.start).min
        state.store(record, eventTimerMs.getOrElse(KeyState.NoTimer),
          open.iterator.map(w =>
            state.windowRows.row(agg.toStored(w.buffer), w.revisions, w.start, w.end, w.dirty, w.previous,
              w.onTimeFired, w.lastPaneMs)),
          open.size, earliest)
      }
    }

    /** Drops all of the key's state and its event-time timer. */
    def release(): Unit = {
      eventTimerMs.foreach(getHandle.deleteTimer)
      eventTimerMs = None
      state.clear()
      released = true
    }

    /**
     * The key's event-time timer (max_skew, closing='global') for the state about to be stored:
     * the one registered is kept while it is no later than needed ([[eventTimer]]) and still
     * ahead of Spark's global watermark; otherwise it is replaced. A key whose own rows close
     * its windows moves its earliest window every window, and moving a timer is two deletes and
     * two puts in the state store; a timer kept that fires before it
     * is needed finds nothing due and moves then ([[handleExpiredTimer]]). Never later than
     * needed, so a window the floor closes is still emitted in the batch in which Spark's
     * global watermark gets there.
     */
    private def placeEventTimer(): Unit = {
      val wanted = eventTimer(record, windows)
      val globalMs = timerValues.getCurrentWatermarkInMs()
      val keep = eventTimerMs.exists(t => t > globalMs && wanted.exists(t <= _))
      if (!keep) {
        eventTimerMs.foreach(getHandle.deleteTimer)
        wanted.foreach(getHandle.registerTimer)
        eventTimerMs = wanted
      }
    }

    /**
     * A timer of the key just fired (Spark deletes it after the handler). An event-time timer
     * kept from an earlier batch may fire before the floor reaches the key's earliest window:
     * then nothing is due, and it is replaced by the one needed, written into the stored row as
     * it was (so the key's watermark and metrics look as if it had not fired). Returns whether
     * the timer fired that early.
     */
    def timerFired(): Boolean = {
      eventTimerMs = None
      if (!policy.usesGlobalWatermark) return false
      val wanted = eventTimer(record, windows)
      wanted.filter(_ > timerValues.getCurrentWatermarkInMs()) match {
        case Some(t) =>
          getHandle.registerTimer(t)
          loaded.foreach(state.storeEventTimer(_, t))
          true
        case None => false
      }
    }
  }

  /**
   * One key's partials of one micro-batch: each is late (counted, its rows kept if asked) or
   * goes into the key's windows (`add`); then the watermark advances and the windows it passed
   * fire (`close`).
   */
  override def handleInputRows(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    val keyValues = this.keyValues(key)
    // On the arrival clock the idle rule decides at the start of the batch, before its rows (at
    // the clock Spark's watermark gives the batch, on the key's state from earlier batches), so a
    // data batch decides as a no-data batch at the same clock would: docs/semantics.md, "Idle keys".
    val (idleOut, batch) = {
      val first = new KeyBatch(timerValues)
      if (!policy.usesArrivalClock || !first.existed) (Nil, first)
      else idleStep(keyValues, first, timerValues, tally = false) match {
        case Some(out) => (out, new KeyBatch(timerValues)) // stored or forgotten: load it again
        case None => (Nil, first)
      }
    }
    val update = batch.update
    val watermarkAtStart = update.atStart
    var late = 0L
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    while (rows.hasNext) {
      val partial = this.partial(rows.next())
      val start = partial.getLong(startOrdinal)
      // A copy (dedup) is dropped before anything else: not aggregated, not late, and it does
      // not move the watermark; copies dropped within the partition are counted too.
      if (plan.dedup) batch.duplicates += partial.getLong(layout.duplicates)
      if (plan.dedup && duplicate(partial, start)) batch.duplicates += partial.getLong(layout.rows)
      else {
        update.observe(partial)
        if (isLate(start, watermarkAtStart)) {
          late += partial.getLong(layout.rows)
          keptLateRows(partial, keyValues, watermarkAtStart, lateRowsOut)
        } else add(batch, partial, start)
      }
    }
    val emitted = close(keyValues, batch, update.finish(), watermarkAtStart)
    batch.store(late)
    val lateOut =
      if (late > 0) Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
      else Iterator.empty
    val held =
      if (update.regressed)
        Iterator.single(plan.emitter.heldWatermark(keyValues, update.record.regressions, update.atStart))
      else Iterator.empty
    scheduleProcessingTimer(batch, timerValues)
    tallyKey(batch, hadRows = true, timerValues)
    idleOut.iterator ++ emitted.iterator ++ lateOut ++ held
  }

  /**
   * An on-time partial: merged into its aligned window; or, for sessions, a new interval
   * [t, end) (end: t + gap, or the row's own end with a per-row gap) that `close` merges with
   * the key's sessions.
   */
  private def add(batch: KeyBatch, partial: InternalRow, start: Long): Unit = plan.windows match {
    case aligned: AlignedWindows =>
      val window = batch.window(aligned, start)
      agg.merge(window.buffer, partial)
      window.dirty = true
    case SessionWindows(gap) =>
      val end = gap match {
        case Some(g) => start + g
        case None => partial.getLong(layout.sessionEnd)
      }
      val interval = new OpenWindow(start, end, agg.newBuffer(), 0, dirty = true)
      agg.merge(interval.buffer, partial)
      batch.intervals += interval
  }

  /** Fires the windows `watermarkNow` passed and evicts the expired ones: [[closeWindows]], [[closeSessions]]. */
  private def close(
      keyValues: InternalRow, batch: KeyBatch, watermarkNow: Long, watermarkAtStart: Long): collection.Seq[Row] =
    plan.windows match {
      case _: AlignedWindows => closeWindows(keyValues, batch, watermarkNow, watermarkAtStart)
      case _: SessionWindows => closeSessions(keyValues, batch, watermarkNow, watermarkAtStart)
    }

  /**
   * The per-key metrics tallied since the last call, replaced by a new tally (null with
   * metrics="counts"): for a driver of the processor outside a query (the in-memory tests).
   */
  private[keyedwatermarks] def takeTally(): KeyTally = {
    val taken = tally
    if (tally != null) tally = new KeyTally
    taken
  }

  /** Adds the key, as the call left it, to the task's per-key metrics when they are on (option metrics). */
  private def tallyKey(batch: KeyBatch, hadRows: Boolean, timerValues: TimerValues): Unit = if (tally != null) {
    import WindowEmitter._
    val flags =
      (if (hadRows) HadRows else 0) | (if (batch.existed) 0 else WasNew) | (if (batch.released) Released else 0)
    // A key that left state has no watermark any more: it does not count in the lag.
    val wm = if (batch.released) HeldWatermark.Undefined else batch.update.record.watermark
    val global = globalWatermark(timerValues)
    val lag = if (global == HeldWatermark.Undefined || wm == HeldWatermark.Undefined) HeldWatermark.Undefined
    else HeldWatermark.saturatingMinus(global, wm)
    tally.add(flags, if (batch.released) 0 else batch.windows.size, wm, lag, batch.duplicates,
      policy.stuckAfterMicros)
  }

  /** Emits a kept late row per original row of a late partial. */
  private def keptLateRows(
      partial: InternalRow, keyValues: InternalRow, watermark: Long, out: mutable.ArrayBuffer[Row]): Unit =
    if (plan.keepLateRows) {
      val kept = partial.getArray(layout.kept)
      var i = 0
      while (i < kept.numElements()) {
        out += plan.emitter.lateRow(keyValues, kept.getStruct(i, layout.keptWidth), watermark)
        i += 1
      }
    }

  /**
   * Sessions: merges the batch's intervals with the key's open sessions where they touch (start
   * <= end of the previous, as Spark's session_window merges); a session fires its panes by
   * [[Firing.pane]] (its on-time pane when the key's watermark passes its end, again as its
   * next revision whenever it changed since and is due, and with early firings at every change);
   * it leaves state when end + allowed lateness <= the watermark. A merged session continues the
   * highest revision count among its parts, has fired on time if one of them has, and with
   * accumulation='retracting' withdraws their last panes with its next pane.
   */
  private def closeSessions(
      keyValues: InternalRow, batch: KeyBatch, watermarkNow: Long, watermarkAtStart: Long): collection.Seq[Row] = {
    val sorted = (batch.windows.values ++ batch.intervals).toArray.sortBy(_.start)
    batch.intervals.clear()
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
          val parts = sorted.slice(i, j)
          val merged = new OpenWindow(start, end, agg.newBuffer(), parts.map(_.revisions).max, parts.exists(_.dirty),
            onTimeFired = parts.exists(_.onTimeFired))
          parts.foreach(p => agg.merge(merged.buffer, agg.toStored(p.buffer).copy()))
          if (plan.emission.retracting) merged.replacedPanes = parts.iterator.flatMap(p => Option(p.previous)).toList
          merged
        }
      Firing.pane(plan.emission, ClosedWindows.closedBy(end, watermarkNow), session.onTimeFired, session.dirty)
        .foreach(fire(keyValues, session, _, watermarkAtStart, batch.nowMs, emitted))
      if (!ClosedWindows.closedBy(end + plan.allowedLatenessMicros, watermarkNow)) batch.windows.update(start, session)
      i = j
    }
    emitted
  }

  /**
   * Aligned windows: fires and evicts the key's windows for `watermarkNow`, in window order: a
   * window fires its first revision when due; with allowed lateness a window that already fired
   * and got rows in this batch (dirty) fires again as the next revision; expired windows leave
   * state.
   */
  private def closeWindows(
      keyValues: InternalRow, batch: KeyBatch, watermarkNow: Long, reportedWatermark: Long): collection.Seq[Row] = {
    val out = mutable.ArrayBuffer.empty[Row]
    batch.windows.values.toArray.sortBy(_.start).foreach { window =>
      Firing.pane(plan.emission, due(window, watermarkNow), window.onTimeFired, window.dirty,
        spaced(window, batch.nowMs)).foreach(fire(keyValues, window, _, reportedWatermark, batch.nowMs, out))
      if (expired(window, watermarkNow)) batch.windows.remove(window.start)
    }
    out
  }

  /**
   * Emits the window's next pane, as its accumulation mode says: the whole window
   * (accumulating), the rows since its last pane (discarding: the buffer starts over), or the
   * whole window after a row withdrawing the last pane (retracting: the pane's result is kept;
   * a merged session withdraws the last panes of the sessions it replaces).
   */
  private def fire(
      keyValues: InternalRow, window: OpenWindow, pane: Pane, reported: Long, nowMs: Long,
      out: mutable.Growable[Row]): Unit = {
    val result = agg.result(windowGroup(keyValues, window.start, window.end), window.buffer)
    if (plan.emission.retracting) {
      if (window.previous != null)
        out += plan.emitter.window(window.previous, pane, window.revisions, retraction = true, reported)
      window.replacedPanes.foreach(p =>
        out += plan.emitter.window(p, pane, window.revisions, retraction = true, reported))
      window.replacedPanes = Nil
    }
    out += plan.emitter.window(result, pane, window.revisions, retraction = false, reported)
    plan.emission.accumulation match {
      case Emission.Accumulating => ()
      case Emission.Discarding => window.buffer = agg.newBuffer()
      case Emission.Retracting => window.previous = result.copy()
    }
    window.revisions += 1
    window.dirty = false
    if (pane == Pane.OnTime) window.onTimeFired = true
    window.lastPaneMs = nowMs
  }

  /**
   * A timer. With idle_timeout an idle key's windows that have not fired yet are emitted (with
   * advance_when_idle its watermark follows the wall clock instead), and a key that has been
   * idle without open windows for idle_timeout more is forgotten. Otherwise the key's watermark
   * follows its clock (processing time, a source turning idle, Spark's global watermark) and
   * the windows it passes are emitted; a key left without windows leaves state.
   */
  override def handleExpiredTimer(
      key: Row, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo): Iterator[Row] = {
    val batch = new KeyBatch(timerValues)
    // A timer of a key that already left state (registered before a restart with other
    // options): nothing to do, and nothing may be written.
    if (!batch.existed) return Iterator.empty
    if (batch.timerFired()) return Iterator.empty
    val keyValues = this.keyValues(key)
    val update = batch.update
    val record = update.record
    val now = IdleClockNow(policy, timerValues)
    val idled = idleStep(keyValues, batch, timerValues, tally = true)
    if (idled.isDefined) return idled.get.iterator
    val idle = isIdle(record, now)
    if (batch.windows.isEmpty && !policy.floors.forall(_.appliesAtStart)) {
      // closing='fleet': a key kept without windows until the skew bound reached it leaves now.
      batch.store(0L)
      tallyKey(batch, hadRows = false, timerValues)
      return Iterator.empty
    }
    val watermarkAtStart = update.atStart
    val watermarkNow = update.finish()
    val out = close(keyValues, batch, watermarkNow, watermarkAtStart)
    if (idle && batch.windows.isEmpty && record.quietSinceMs == HeldWatermark.NoArrival) record.quietSinceMs = now
    batch.store(0L)
    scheduleProcessingTimer(batch, timerValues)
    tallyKey(batch, hadRows = false, timerValues)
    out.iterator
  }

  /** Whether the key has been silent for idle_timeout at the idle clock's `now`. */
  private def isIdle(record: KeyRecord, now: Long): Boolean =
    record.lastArrivalMs != HeldWatermark.NoArrival && policy.idle.exists(rule => now - record.lastArrivalMs >= rule.timeoutMillis)

  /**
   * The idle rule at the idle clock's now: an idle key's unfired windows are emitted (unless
   * its watermark advances instead), and a key idle long enough is forgotten. Returns the rows
   * emitted when it acted (the key then stored or forgotten), None when it did not.
   */
  private def idleStep(
      keyValues: InternalRow, batch: KeyBatch, timerValues: TimerValues, tally: Boolean): Option[Seq[Row]] = {
    val record = batch.update.record
    val now = IdleClockNow(policy, timerValues)
    val forgotten = policy.idle.exists(_.forgotten(record, now))
    if (!(isIdle(record, now) && (policy.idle.exists(_.emitsWhenIdle) || forgotten))) return None
    val out = emitUnfired(keyValues, batch, batch.update.atStart)
    if (forgotten) {
      state.clear()
      getHandle.listTimers().foreach(t => getHandle.deleteTimer(t))
      batch.released = true
    } else {
      // The windows just emitted are final: the watermark moves past them (so rows for them
      // are late from now on) and the key keeps only its record until it is forgotten.
      batch.windows.clear()
      if (record.quietSinceMs == HeldWatermark.NoArrival) record.quietSinceMs = now
      batch.store(0L)
      scheduleProcessingTimer(batch, timerValues)
    }
    if (tally) tallyKey(batch, hadRows = false, timerValues)
    Some(out)
  }

  /**
   * The key's windows that have not fired yet, and sessions that changed since they fired
   * (their next revision), as emitted when the key goes idle; the watermark is raised past
   * every window of the key (end plus allowed lateness), so that they are final.
   */
  private def emitUnfired(keyValues: InternalRow, batch: KeyBatch, reported: Long): Seq[Row] = {
    val windows = batch.windows.values.toSeq.sortBy(_.start)
    val out = mutable.ArrayBuffer.empty[Row]
    windows.foreach { w =>
      Firing.pane(plan.emission, due = true, w.onTimeFired, w.dirty).foreach(fire(keyValues, w, _, reported,
          batch.nowMs,
          out))
    }
    windows.foreach(w => batch.update.watermark.raise(w.end + plan.allowedLatenessMicros))
    out.toSeq
  }

  /**
   * The event-time timer of a key (max_skew, closing='global'): when Spark's global watermark
   * (ms) will let the key's floor reach the threshold of its earliest open window.
   */
  private def eventTimer(record: KeyRecord, windows: mutable.LongMap[OpenWindow]): Option[Long] =
    if (windows.isEmpty) {
      // closing='fleet': a key kept without windows leaves when the floors that cover a returning
      // key reach its watermark (WatermarkPolicy.releasable).
      if (policy.floors.forall(_.appliesAtStart) || record.watermark == HeldWatermark.Undefined) None
      else earliest(eventTimeFloors.filter(_.coversReturningKey).flatMap(_.reaches(record.watermark, record)))
        .map(math.max(_, FirstEventTimerMs))
    } else {
      val next = windows.values.iterator.map(_.threshold(record.watermark)).min
      // Never at or below 0 ms: while Spark's global watermark is still 0 (no watermark yet, the
      // first batch) Spark fires such a timer at once, in the same batch, where it cannot close
      // anything, and then deletes it, dropping the registration the handler just renewed. From
      // 1 ms it fires in the first batch with a real watermark. A watermark above 0 has already
      // closed every window whose timer would be at or below it (its floor is applied first).
      earliest(eventTimeFloors.flatMap(_.reaches(next, record))).map(math.max(_, FirstEventTimerMs))
    }

  private def earliest(times: Seq[Long]): Option[Long] = if (times.isEmpty) None else Some(times.min)

  /** The earliest event-time timer registered (see [[eventTimer]]). */
  private val FirstEventTimerMs = 1L

  /**
   * Registers the key's next timer on the idle clock or the wall clock (a processing-time timer,
   * or an event-time timer on the arrival clock: see IdleClockNow): when the key turns idle or
   * is forgotten, when a source turns idle, or when the clock will close the key's earliest open
   * window. (Event-time timers of the floors on Spark's global watermark: KeyBatch.placeEventTimer.)
   */
  private def scheduleProcessingTimer(batch: KeyBatch, timerValues: TimerValues): Unit = {
    if (!policy.usesClockTimers || policy.usesGlobalWatermark) return
    val handle = getHandle
    handle.listTimers().foreach(t => handle.deleteTimer(t))
    if (batch.released) return
    val record = batch.update.record
    // The watermark at which the earliest open window next changes (fires or expires).
    val next =
      if (batch.windows.isEmpty) None else Some(batch.windows.values.map(_.threshold(record.watermark)).min)
    val times = mutable.ArrayBuffer.empty[Long]
    val now = IdleClockNow(policy, timerValues)
    policy.idle.foreach(rule => times ++= rule.nextTimer(record, hasOpenWindows = next.isDefined))
    next.foreach(t => processingTimeFloors.foreach(f => times ++= f.reaches(t, record)))
    times ++= batch.update.sourceIdleTimes
    for (i <- times.indices) if (times(i) <= now) times(i) = now + 1
    if (times.nonEmpty) handle.registerTimer(times.min)
  }

  /** Grouping values as Spark's Aggregate lays them out: the key columns, then the window struct. */
  private def windowGroup(keyValues: InternalRow, start: Long, end: Long): InternalRow =
    new JoinedRow(keyValues, InternalRow(InternalRow(start, end)))
}
