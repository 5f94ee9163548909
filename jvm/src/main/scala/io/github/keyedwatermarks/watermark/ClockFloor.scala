package io.github.keyedwatermarks.watermark

import HeldWatermark.{NoArrival, Undefined, saturatingMinus}

/** The clock a floor follows, and so the kind of timer that wakes a key without rows. */
private[keyedwatermarks] sealed trait Clock
/** Spark's global event-time watermark (TimeMode.EventTime, event-time timers). */
private[keyedwatermarks] case object EventTimeClock extends Clock
/** The micro-batch's processing time (TimeMode.ProcessingTime, processing-time timers). */
private[keyedwatermarks] case object ProcessingTimeClock extends Clock
/**
 * The stream's arrival clock (idle options with arrival_time): Spark's global watermark defined
 * on the rows' arrival time with delay 0 (TimeMode.EventTime, event-time timers), in ms.
 */
private[keyedwatermarks] case object ArrivalClock extends Clock

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

  /**
   * Whether the floor also raises the watermark at the start of a micro-batch, before the rows
   * are judged late (every floor but the fleet's: see [[FleetFloor]]).
   */
  def appliesAtStart: Boolean = true

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
 * closing='fleet': a key's watermark follows Spark's global watermark `E` behind the key's own
 * learnt skew `s(k)`, never past the key's max event time (docs/semantics.md, "Fleet closing"): a key in step with the fleet
 * (`s(k) = 0`) closes its windows with Spark's global watermark, a key whose rows arrive behind
 * the fleet keeps that lag. The skew is learnt at the end of each batch that moved the key's
 * max event time ([[learn]]), before the floor is applied. Not applied at the start of a batch, so a row is
 * judged against the fleet floor of the key's previous batch (or timer), at most Spark's
 * watermark one batch older: the batch of grace Spark's own late-row check gives. It does not
 * cover a returning key (it is the key's own skew): a key without open windows stays in state,
 * with its skew, until the skew bound `maxSkewMicros` reaches its watermark.
 */
private[keyedwatermarks] final case class FleetFloor(maxSkewMicros: Long, latenessMicros: Long) extends ClockFloor {
  require(maxSkewMicros >= 0, s"max_skew must not be negative, got $maxSkewMicros microseconds")
  def clock: Clock = EventTimeClock
  def coversReturningKey: Boolean = false
  override def appliesAtStart: Boolean = false
  // Never past the key's own max event time: the window holding its latest row waits for its
  // next rows (or the skew bound), so a key whose rows come in bursts loses none between them.
  def floor(record: KeyRecord, nowMs: Long, global: Long): Long =
    if (global == Undefined || record.fleetSkew == Undefined) Undefined
    else math.min(saturatingMinus(global, record.fleetSkew), record.maxEventTime)
  def reaches(threshold: Long, record: KeyRecord): Option[Long] =
    if (record.fleetSkew == Undefined || threshold > record.maxEventTime) None
    else Some(Math.floorDiv(threshold + record.fleetSkew + 999L, 1000L))

  /**
   * The key's skew after a batch with rows, at Spark's global watermark `global`, learnt only
   * when the batch moved the key's max event time past `maxBefore` (or no skew was learnt yet):
   * a retransmitted old row leaves the max, and so the skew, where it was. A batch that shows
   * the key in step (its own watermark, max event time minus the lateness, at or above
   * `global`) forgets the skew: 0. Otherwise the skew is the larger of how far the key's own
   * watermark trails `global`, and of the previous skew decayed by 1/[[FleetFloor.Decay]] of the
   * fleet's progress since it was learnt (`fleetReference`); at most the skew bound. So at the
   * end of the batch the floor `global - skew` is never above the key's own watermark, and a
   * sparse key whose newest row was delayed once closes with the fleet again at its next row
   * in step.
   */
  def learn(record: KeyRecord, maxBefore: Long, global: Long): Unit =
    if (global != Undefined && record.maxEventTime != Undefined &&
      (record.fleetSkew == Undefined || record.maxEventTime > maxBefore)) {
      val own = saturatingMinus(record.maxEventTime, latenessMicros)
      val needed =
        try Math.subtractExact(global, own)
        catch { case _: ArithmeticException => if (global > own) Long.MaxValue else Long.MinValue }
      val decayed =
        if (record.fleetSkew == Undefined || needed <= 0L) 0L
        else record.fleetSkew - (global - record.fleetReference) / FleetFloor.Decay
      record.fleetSkew = math.min(maxSkewMicros, math.max(0L, math.max(needed, decayed)))
      record.fleetReference = global
    }
}

private[keyedwatermarks] object FleetFloor {
  /**
   * A learnt skew falls by at most this fraction of the fleet's progress between two batches of
   * the key while they show it behind the fleet: slow enough that a key delayed by a varying
   * amount keeps its largest recent skew between the rows that show it (a batch that shows the
   * key in step forgets the skew at once).
   */
  val Decay: Long = 16L
}

/**
 * advance_when_idle: once a key has been silent for `timeoutMillis` on the idle clock `clock`
 * (the arrival clock or the wall clock), its watermark follows that clock from where it was at
 * its last arrival, keeping its lag. Per key (the key's own arrival), so it does not cover a
 * returning key: the idle rule forgets such keys. `nowMs` is the idle clock's now.
 */
private[keyedwatermarks] final case class IdleAdvanceFloor(timeoutMillis: Long, clock: Clock = ProcessingTimeClock)
    extends ClockFloor {
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
