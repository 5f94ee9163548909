package io.github.keyedwatermarks.watermark

import HeldWatermark.NoArrival

/**
 * idle_timeout: what happens to a key that has had no rows for `timeoutMillis` of processing
 * time (docs/semantics.md, "Idle keys"). Either way a key that has been idle without open
 * windows for the timeout is forgotten (leaves state).
 */
private[keyedwatermarks] sealed trait IdleRule extends Serializable {
  def timeoutMillis: Long

  /** Whether the key's windows are emitted when it turns idle (rather than its watermark advancing). */
  def emitsWhenIdle: Boolean

  /** Whether the key leaves state at processing time `nowMs`. */
  def forgotten(record: KeyRecord, nowMs: Long): Boolean =
    record.quietSinceMs != NoArrival && nowMs - record.quietSinceMs >= timeoutMillis

  /** When the key next turns idle or is forgotten (a processing-time timer), given its open windows. */
  def nextTimer(record: KeyRecord, hasOpenWindows: Boolean): Option[Long] =
    if (record.quietSinceMs != NoArrival) Some(record.quietSinceMs + timeoutMillis)
    else if (record.lastArrivalMs != NoArrival && (emitsWhenIdle || !hasOpenWindows))
      Some(record.lastArrivalMs + timeoutMillis)
    else None // advancing: the IdleAdvanceFloor's timer closes the windows
}

private[keyedwatermarks] object IdleRule {
  /** The idle key's unfired windows are emitted (final: later rows for them are late). */
  final case class EmitWhenIdle(timeoutMillis: Long) extends IdleRule {
    def emitsWhenIdle: Boolean = true
    // Also forgotten after twice the timeout without rows, should its quiet time never be set.
    override def forgotten(record: KeyRecord, nowMs: Long): Boolean = super.forgotten(record, nowMs) ||
      (record.lastArrivalMs != NoArrival && nowMs - record.lastArrivalMs >= 2 * timeoutMillis)
  }

  /** advance_when_idle: the idle key's watermark follows the wall clock ([[IdleAdvanceFloor]]). */
  final case class AdvanceWhenIdle(timeoutMillis: Long) extends IdleRule {
    def emitsWhenIdle: Boolean = false
  }
}
