package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.streaming.TimerValues

import io.github.keyedwatermarks.emission.{KeyTally, WindowEmitter}
import io.github.keyedwatermarks.partials.PartialLayout
import io.github.keyedwatermarks.state.{KeyState, KeyWindows, OpenWindow, StoredKey}
import io.github.keyedwatermarks.watermark.{HeldWatermark, IdleClockNow, WatermarkPolicy}
import io.github.keyedwatermarks.window.AlignedWindows

/**
 * One key's state for one batch or timer: watermark record, open windows by start, and the
 * event-time timer registered for it. Loaded when made; [[store]] writes it back once.
 */
private[operator] final class KeyBatch(
    val timerValues: TimerValues, state: KeyState, keyWindows: KeyWindows, policy: WatermarkPolicy,
    layout: PartialLayout, timers: KeyTimers,
    /** Spark's global watermark in microseconds (only with max_skew / closing='global'). */
    globalWatermark: Long) {
  private val loaded: Option[StoredKey] = state.load()
  /** Whether the key had state (false: a new key, or one that returns after leaving state). */
  val existed: Boolean = loaded.isDefined
  val record = loaded.map(_.record).getOrElse(state.fresh())
  /**
   * The key's watermark as stored by the call before, when every window it passed fired its
   * on-time pane: a window in state that it passes has fired on time (before the floors of
   * this call raise it).
   */
  val watermarkStored: Long = record.watermark
  val windows: mutable.LongMap[OpenWindow] =
    loaded.fold(mutable.LongMap.empty[OpenWindow])(k => keyWindows.load(k.windows, watermarkStored))

  /** Sessions: this batch's on-time intervals, merged with the key's sessions by `close`. */
  val intervals = mutable.ArrayBuffer.empty[OpenWindow]
  /** The event-time timer registered for the key now, if any. */
  var eventTimerMs: Option[Long] = loaded.map(_.eventTimerMs).filter(_ != KeyState.NoTimer)
  private def advance() =
    new WatermarkAdvance(policy, state, record, layout, IdleClockNow(policy, timerValues), globalWatermark)
  /** The key's watermark across this call; real_time: across the current row ([[nextStep]]). */
  var update: WatermarkAdvance = advance()
  /** Processing time of the call: the micro-batch's timestamp (constant within the batch). */
  val nowMs: Long = timerValues.getCurrentProcessingTimeInMs()
  /** Whether the key left state in this call. */
  var released = false
  /** Rows dropped as copies (dedup) in this call. */
  var duplicates = 0L

  /** The aligned window starting at `start`, opened if needed. */
  def window(aligned: AlignedWindows, start: Long): OpenWindow =
    windows.getOrElseUpdate(start, keyWindows.newWindow(start, aligned.windowEnd(start)))

  /**
   * Writes the record and the windows still open: one state store write for the key; or,
   * when no window is left and the policy's floor covers a returning key (see
   * WatermarkPolicy.releasesKeysWithoutWindows), removes the key from state.
   */
  def store(lateRows: Long): Unit = {
    record.lateRows += lateRows
    if (windows.isEmpty && policy.releasable(record, IdleClockNow(policy, timerValues), globalWatermark))
      release()
    else {
      state.dedupEntries.foreach(_.flush(record.watermark))
      if (policy.usesGlobalWatermark) timers.placeEventTimer(this)
      val open = windows.values
      val earliest = if (open.isEmpty) HeldWatermark.Undefined else open.iterator.map(_.start).min
      state.store(record, eventTimerMs.getOrElse(KeyState.NoTimer), keyWindows.rowsOf(open), open.size, earliest)
    }
  }

  /**
   * real_time: the next row's step on the record as the row before left it, as if stored and
   * loaded again (KeyedWindowProcessor.rowSteps): a new watermark advance (its floors and start
   * from the record). The windows stay as the step before left them.
   */
  def nextStep(): Unit = update = advance()

  /** Whether [[store]] would remove the key from state now (no window left, and the policy lets it go). */
  def releasable: Boolean =
    windows.isEmpty && policy.releasable(record, IdleClockNow(policy, timerValues), globalWatermark)

  /** Drops all of the key's state and its event-time timer. */
  def release(): Unit = {
    timers.dropEventTimer(this)
    state.clear()
    released = true
  }

  /** Writes the key's row back as it was loaded, with another event-time timer (see KeyTimers.timerFired). */
  def storeEventTimer(timerMs: Long): Unit = loaded.foreach(state.storeEventTimer(_, timerMs))

  /** Adds the key, as the call left it, to the task's per-key metrics. */
  def tallyInto(tally: KeyTally, hadRows: Boolean): Unit = {
    import WindowEmitter._
    val flags = (if (hadRows) HadRows else 0) | (if (existed) 0 else WasNew) | (if (released) Released else 0)
    // A key that left state has no watermark any more: it does not count in the lag.
    val wm = if (released) HeldWatermark.Undefined else update.record.watermark
    val lag = if (globalWatermark == HeldWatermark.Undefined || wm == HeldWatermark.Undefined) HeldWatermark.Undefined
    else HeldWatermark.saturatingMinus(globalWatermark, wm)
    tally.add(flags, if (released) 0 else windows.size, wm, lag, duplicates, policy.stuckAfterMicros)
  }
}
