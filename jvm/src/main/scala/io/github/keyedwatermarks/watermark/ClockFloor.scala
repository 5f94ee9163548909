package io.github.keyedwatermarks.watermark

import HeldWatermark.{NoArrival, Undefined, saturatingMinus}

/** The clock a floor follows, and so the kind of timer that wakes a key without rows. */
private[keyedwatermarks] sealed trait Clock
/** Spark's global event-time watermark (TimeMode.EventTime, event-time timers). */
private[keyedwatermarks] case object EventTimeClock extends Clock
/** The micro-batch's processing time (TimeMode.ProcessingTime, processing-time timers). */
private[keyedwatermarks] case object ProcessingTimeClock extends Clock

/**
 * A floor under a key's watermark that follows a clock: it raises the watermark without the
 * key's rows and without counting a regression, so that the windows of a silent key close.
 */
private[keyedwatermarks] sealed trait ClockFloor extends Serializable {
  def clock: Clock

  /**
   * Whether a key that left state, returning later, is covered by this floor: it follows a
   * clock every key shares, so the returning key's watermark starts at least as high as the
   * one it left with (see [[WatermarkPolicy.releasesKeysWithoutWindows]]).
   */
  def coversReturningKey: Boolean

  /** The floor for `record` at processing time `nowMs` with Spark's global watermark `global` (micros). */
  def floor(record: KeyRecord, nowMs: Long, global: Long): Long

  /**
   * When this floor will reach the watermark `threshold`: the value of its clock, in
   * milliseconds (processing time, or Spark's global watermark), at which to set the key's
   * timer; None if it never will from the state as it is.
   */
  def reaches(threshold: Long, record: KeyRecord): Option[Long]
}

/** clock='processing_time': `wm(k) = processing time - L` for every key. */
private[keyedwatermarks] final case class ProcessingTimeFloor(latenessMicros: Long) extends ClockFloor {
  def clock: Clock = ProcessingTimeClock
  def coversReturningKey: Boolean = true
  def floor(record: KeyRecord, nowMs: Long, global: Long): Long =
    saturatingMinus(Math.multiplyExact(nowMs, 1000L), latenessMicros)
  def reaches(threshold: Long, record: KeyRecord): Option[Long] =
    Some(Math.floorDiv(threshold + latenessMicros + 999L, 1000L))
}

/** closing='global': every key's watermark is Spark's global watermark (`withWatermark`). */
private[keyedwatermarks] case object GlobalWatermarkFloor extends ClockFloor {
  def clock: Clock = EventTimeClock
  def coversReturningKey: Boolean = true
  def floor(record: KeyRecord, nowMs: Long, global: Long): Long = global
  def reaches(threshold: Long, record: KeyRecord): Option[Long] = Some(Math.floorDiv(threshold + 999L, 1000L))
}

/**
 * max_skew: a key's watermark trails Spark's global watermark by at most `skewMicros`, plus the
 * key's own lateness beyond the default `defaultLatenessMicros` (per-key or adaptive). Never
 * less than the skew itself, so the floor of a key that returns after leaving state (default
 * lateness) is at least the floor that released it.
 */
private[keyedwatermarks] final case class SkewFloor(skewMicros: Long, defaultLatenessMicros: Long) extends ClockFloor {
  require(skewMicros >= 0, s"max_skew must not be negative, got $skewMicros microseconds")
  def clock: Clock = EventTimeClock
  def coversReturningKey: Boolean = true
  private def extra(record: KeyRecord) = math.max(0L, record.latenessMicros - defaultLatenessMicros)
  def floor(record: KeyRecord, nowMs: Long, global: Long): Long =
    if (global == Undefined) Undefined else saturatingMinus(saturatingMinus(global, skewMicros), extra(record))
  def reaches(threshold: Long, record: KeyRecord): Option[Long] =
    Some(Math.floorDiv(threshold + skewMicros + extra(record) + 999L, 1000L))
}

/**
 * advance_when_idle: once a key has been silent for `timeoutMillis`, its watermark follows the
 * wall clock from where it was at its last arrival, keeping its lag. Per key (the key's own
 * arrival), so it does not cover a returning key: the idle rule forgets such keys.
 */
private[keyedwatermarks] final case class IdleAdvanceFloor(timeoutMillis: Long) extends ClockFloor {
  def clock: Clock = ProcessingTimeClock
  def coversReturningKey: Boolean = false
  def floor(record: KeyRecord, nowMs: Long, global: Long): Long =
    if (record.lastArrivalMs == NoArrival || record.arrivalWatermark == Undefined) Undefined
    else {
      val idleFor = nowMs - record.lastArrivalMs - timeoutMillis
      if (idleFor > 0) record.arrivalWatermark + idleFor * 1000L else Undefined
    }
  def reaches(threshold: Long, record: KeyRecord): Option[Long] =
    if (record.lastArrivalMs == NoArrival || record.arrivalWatermark == Undefined || record.quietSinceMs != NoArrival)
      None
    else Some(record.lastArrivalMs + timeoutMillis + Math.floorDiv(threshold - record.arrivalWatermark + 999L, 1000L))
}
