package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.streaming.{ExpiredTimerInfo, OutputMode, StatefulProcessor, TimeMode, TimerValues}

import io.github.keyedwatermarks.catalyst.UnsafeRowBytes
import io.github.keyedwatermarks.partials.PartialLayout
import io.github.keyedwatermarks.emission.{KeyTally, WindowEmitter}
import io.github.keyedwatermarks.state.{KeyState, KeyWindows, StageRecord}
import io.github.keyedwatermarks.watermark.{HeldWatermark, IdleClockNow}

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
 *
 * A composition, as Spark's transformWithState splits state variables, timers and the
 * processor: the key's state for one call ([[KeyBatch]], its windows through
 * state.KeyWindows), when windows close ([[WindowClosing]]), where timers go ([[KeyTimers]]),
 * and what fires ([[WindowFiring]]).
 */
private[keyedwatermarks] final class KeyedWindowProcessor(plan: OperatorPlan) extends StatefulProcessor[Row, Row, Row] {

  @transient private var state: KeyState = _
  // The per-key metrics of this task's keys (null with metrics="counts").
  @transient private var tally: KeyTally = _
  @transient private var keyWindows: KeyWindows = _
  @transient private var timers: KeyTimers = _
  @transient private var firing: WindowFiring = _
  @transient private var idleKeys: IdleKeys = _
  @transient private var admission: PartialAdmission = _
  // Interpreted, not an encoder: one conversion per key and call, while an encoder runs the
  // analyzer and generates a projection in every task, which at 4k-row micro-batches cost the
  // operator ~2 ms a task (benchmarks/results/batch-phases-2026-11-29.md).
  @transient private lazy val keys = CatalystTypeConverters.createToCatalystConverter(plan.keySchema)
  private val layout = PartialLayout(plan.payloadSchema)
  private val payloadFields = plan.payloadSchema.length
  private def agg = plan.aggregation
  private def policy = plan.policy
  private val closing = WindowClosing(plan.windows, plan.allowedLatenessMicros)

  /** Whether the stage is planned for real-time mode (option `real_time`). */
  private[keyedwatermarks] def perRow: Boolean = plan.perRow

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    state = new KeyState(getHandle, plan.windowRows, policy, plan.windows, plan.dedup)
    tally = if (plan.keyMetrics) KeyTally.openForTask(plan.tallyId) else null
    keyWindows = new KeyWindows(state.windowRows, agg, plan.windows)
    timers = new KeyTimers(getHandle, policy, closing)
    firing = new WindowFiring(agg, plan.emitter, plan.panes, plan.windows, closing)
    idleKeys = new IdleKeys(getHandle, state, policy, firing, timers)
    admission = new PartialAdmission(plan, layout, state, closing)
  }

  /**
   * What this stage's state is written for, as the checkpoint's record of it holds it
   * (state.StageRecord): what the per-key check of KeyState compares, and the key columns.
   */
  def stageRecord(batch: Long): StageRecord = StageRecord.current(KeyState.describe(plan.windows),
    plan.windowRows.schema,
    plan.keyNames.zip(plan.keySchema.fields).map { case (n, f) => s"$n ${f.dataType.simpleString}" }, batch,
    if (policy.usesArrivalClock) Some(StageRecord.ArrivalTime)
    else if (policy.usesGlobalWatermark) Some(StageRecord.EventTime)
    else None)

  /** Spark's global watermark in microseconds (only with max_skew / closing='global'). */
  private def globalWatermark(timerValues: TimerValues): Long =
    if (!policy.usesGlobalWatermark) HeldWatermark.Undefined
    else {
      val ms = timerValues.getCurrentWatermarkInMs()
      if (ms <= 0) HeldWatermark.Undefined else ms * 1000L
    }

  /** The key's state for one call, loaded. */
  private def keyBatch(timerValues: TimerValues): KeyBatch =
    new KeyBatch(timerValues, state, keyWindows, policy, layout, timers, globalWatermark(timerValues))

  /** The key's values as an InternalRow (a new row each call). */
  private def keyValues(key: Row): InternalRow = keys(key).asInstanceOf[InternalRow]

  /**
   * A partial's payload (its first column) as a row, over its own bytes: merged buffers may
   * keep references into them.
   */
  private def partial(value: Row): InternalRow = UnsafeRowBytes.row(value.getAs[Array[Byte]](0), payloadFields)

  /**
   * One key's partials of one micro-batch: each is late (counted, its rows kept if asked) or
   * goes into the key's windows (`add`); then the watermark advances and the windows it passed
   * fire (`close`).
   */
  override def handleInputRows(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] =
    if (!plan.perRow) step(key, rows, timerValues)
    else if (policy.usesArrivalClock) {
      // real_time on the arrival clock: the idle rule decides before each row, on the key's state
      // as stored; one full step (load, store) per partial.
      val out = mutable.ArrayBuffer.empty[Row]
      while (rows.hasNext) out ++= step(key, Iterator.single(rows.next()), timerValues)
      out.iterator
    } else rowSteps(key, rows, timerValues)

  /**
   * real_time: one step per partial (a row's, partials.RowPartials), each against the key's
   * watermark as the steps before left it (docs/semantics.md, "Real-time mode"), on the key's
   * state loaded once for all the rows Spark hands in this call and stored once after them. A
   * step's result is what a load and store between the rows would give: its watermark advance
   * starts over from the record the step before left ([[KeyBatch.nextStep]]); a key that would
   * leave state after a step (no window left, see KeyBatch.store) leaves it, and the next row
   * loads it afresh. The output is gathered, not lazy: the state is written after the last row,
   * within this call, where every Spark line has the key's implicit grouping key set (4.3's
   * TransformWithStateExec also keeps it set while it reads the returned iterator; the older
   * lines were not checked). Spark hands a key's rows together only as far as they come one
   * after another (GroupedIterator over the unsorted input in real-time mode).
   */
  private def rowSteps(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    val keyValues = this.keyValues(key)
    val out = mutable.ArrayBuffer.empty[Row]
    var batch = keyBatch(timerValues)
    var late = 0L
    var stepped = false
    while (rows.hasNext) {
      if (stepped) {
        if (batch.releasable) {
          batch.store(late)
          late = 0L
          batch = keyBatch(timerValues)
        } else batch.nextStep()
      }
      val rowLate = rowStep(keyValues, batch, this.partial(rows.next()), out)
      late += rowLate
      stepped = true
    }
    batch.store(late)
    timers.scheduleProcessingTimer(batch, timerValues)
    tallyKey(batch, hadRows = true)
    out.iterator
  }

  /** One partial's step on the loaded `batch` (see [[step]], without load or store); returns its late rows. */
  private def rowStep(
      keyValues: InternalRow, batch: KeyBatch, partial: InternalRow, out: mutable.ArrayBuffer[Row]): Long = {
    val update = batch.update
    val watermarkAtStart = update.atStart
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    val late = admission.admit(keyValues, batch, partial, watermarkAtStart, lateRowsOut)
    out ++= firing.close(keyValues, batch, update.finish(), watermarkAtStart)
    if (late > 0) {
      out += plan.emitter.lateRows(keyValues, late, watermarkAtStart)
      out ++= lateRowsOut
    }
    if (update.regressed) out += plan.emitter.heldWatermark(keyValues, update.record.regressions, update.atStart)
    late
  }

  private def step(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    val keyValues = this.keyValues(key)
    // On the arrival clock the idle rule decides at the start of the batch, before its rows (at
    // the clock Spark's watermark gives the batch, on the key's state from earlier batches), so a
    // data batch decides as a no-data batch at the same clock would: docs/semantics.md, "Idle keys".
    val (idleOut, batch) = {
      val first = keyBatch(timerValues)
      if (!policy.usesArrivalClock || !first.existed) (Nil, first)
      else idleKeys.step(keyValues, first, timerValues) match {
        case Some(out) => (out, keyBatch(timerValues)) // stored or forgotten: load it again
        case None => (Nil, first)
      }
    }
    val update = batch.update
    val watermarkAtStart = update.atStart
    var late = 0L
    val lateRowsOut = mutable.ArrayBuffer.empty[Row]
    while (rows.hasNext)
      late += admission.admit(keyValues, batch, this.partial(rows.next()), watermarkAtStart, lateRowsOut)
    val emitted = firing.close(keyValues, batch, update.finish(), watermarkAtStart)
    batch.store(late)
    val lateOut =
      if (late > 0) Iterator.single(plan.emitter.lateRows(keyValues, late, watermarkAtStart)) ++ lateRowsOut
      else Iterator.empty
    val held =
      if (update.regressed)
        Iterator.single(plan.emitter.heldWatermark(keyValues, update.record.regressions, update.atStart))
      else Iterator.empty
    timers.scheduleProcessingTimer(batch, timerValues)
    tallyKey(batch, hadRows = true)
    idleOut.iterator ++ emitted.iterator ++ lateOut ++ held
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
  private def tallyKey(batch: KeyBatch, hadRows: Boolean): Unit = if (tally != null) batch.tallyInto(tally, hadRows)

  /**
   * A timer. With idle_timeout an idle key's windows that have not fired yet are emitted (with
   * advance_when_idle its watermark follows the wall clock instead), and a key that has been
   * idle without open windows for idle_timeout more is forgotten. Otherwise the key's watermark
   * follows its clock (processing time, a source turning idle, Spark's global watermark) and
   * the windows it passes are emitted; a key left without windows leaves state.
   */
  override def handleExpiredTimer(
      key: Row, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo): Iterator[Row] = {
    val batch = keyBatch(timerValues)
    // A timer of a key that already left state (registered before a restart with other
    // options): nothing to do, and nothing may be written.
    if (!batch.existed) return Iterator.empty
    if (timers.timerFired(batch)) return Iterator.empty
    val keyValues = this.keyValues(key)
    val update = batch.update
    val record = update.record
    val now = IdleClockNow(policy, timerValues)
    val idled = idleKeys.step(keyValues, batch, timerValues)
    if (idled.isDefined) {
      tallyKey(batch, hadRows = false)
      return idled.get.iterator
    }
    val idle = idleKeys.isIdle(record, now)
    if (batch.windows.isEmpty && !policy.floors.forall(_.appliesAtStart)) {
      // closing='fleet': a key kept without windows until the skew bound reached it leaves now.
      batch.store(0L)
      tallyKey(batch, hadRows = false)
      return Iterator.empty
    }
    val watermarkAtStart = update.atStart
    val watermarkNow = update.finish()
    val out = firing.close(keyValues, batch, watermarkNow, watermarkAtStart)
    if (idle && batch.windows.isEmpty && record.quietSinceMs == HeldWatermark.NoArrival) record.quietSinceMs = now
    batch.store(0L)
    timers.scheduleProcessingTimer(batch, timerValues)
    tallyKey(batch, hadRows = false)
    out.iterator
  }
}
