package io.github.keyedwatermarks.operator

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.streaming.{StatefulProcessorHandle, TimerValues}

import io.github.keyedwatermarks.state.KeyState
import io.github.keyedwatermarks.watermark.{HeldWatermark, IdleClockNow, KeyRecord, WatermarkPolicy}

/**
 * The idle rule (idle_timeout) on its clock (watermark.IdleClockNow: the arrival clock or the
 * wall clock): an idle key's unfired windows are emitted, unless its watermark advances instead
 * (advance_when_idle), and a key idle long enough is forgotten (docs/semantics.md, "Idle keys").
 * Asked by a timer and, on the arrival clock, at the start of a batch with the key's rows, so a
 * data batch decides as a no-data batch at the same clock would.
 */
private[operator] final class IdleKeys(
    handle: StatefulProcessorHandle, state: KeyState, policy: WatermarkPolicy, firing: WindowFiring,
    timers: KeyTimers) {

  /** Whether the key has been silent for idle_timeout at the idle clock's `now`. */
  def isIdle(record: KeyRecord, now: Long): Boolean =
    record.lastArrivalMs != HeldWatermark.NoArrival && policy.idle.exists(rule =>
      now - record.lastArrivalMs >= rule.timeoutMillis)

  /**
   * The idle rule at the idle clock's now. Returns the rows emitted when it acted (the key then
   * stored or forgotten), None when it did not.
   */
  def step(keyValues: InternalRow, batch: KeyBatch, timerValues: TimerValues): Option[Seq[Row]] = {
    val record = batch.update.record
    val now = IdleClockNow(policy, timerValues)
    val forgotten = policy.idle.exists(_.forgotten(record, now))
    if (!(isIdle(record, now) && (policy.idle.exists(_.emitsWhenIdle) || forgotten))) return None
    val out = firing.emitUnfired(keyValues, batch, batch.update.atStart)
    if (forgotten) {
      state.clear()
      handle.listTimers().foreach(t => handle.deleteTimer(t))
      batch.released = true
    } else {
      // The windows just emitted are final: the watermark moves past them (so rows for them
      // are late from now on) and the key keeps only its record until it is forgotten.
      batch.windows.clear()
      if (record.quietSinceMs == HeldWatermark.NoArrival) record.quietSinceMs = now
      batch.store(0L)
      timers.scheduleProcessingTimer(batch, timerValues)
    }
    Some(out)
  }
}
