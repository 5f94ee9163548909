package io.github.keyedwatermarks.watermark

/**
 * The watermark of one key: it is *held*, i.e. it never moves backward. In each micro-batch
 * the policy's [[Proposal]] gives a value from the key's own rows (its max event time minus its
 * lateness, or the min over its sources); a proposal below the held watermark is not applied
 * but counted as an attempted regression. The policy's [[ClockFloor]]s (processing time, idle
 * advance, Spark's global watermark for max_skew / closing='global') raise it without counting.
 *
 * Only the key's own rows (and those clocks) move it: other keys never do.
 */
private[keyedwatermarks] final class HeldWatermark(policy: WatermarkPolicy, val record: KeyRecord) {
  import HeldWatermark._

  def observe(eventTime: Long): Unit = if (eventTime > record.maxEventTime) record.maxEventTime = eventTime

  /**
   * Raises the watermark to the clock floors at processing time `nowMs` with Spark's global
   * watermark `globalWatermark` (micros, Undefined if none); returns the watermark.
   */
  def applyFloors(nowMs: Long, globalWatermark: Long): Long = {
    raise(floor(nowMs, globalWatermark, atStart = true))
    record.watermark
  }

  private def floor(nowMs: Long, global: Long, atStart: Boolean = false): Long = {
    var f = Undefined
    policy.floors.foreach(c => if (!atStart || c.appliesAtStart) f = max(f, c.floor(record, nowMs, global)))
    f
  }

  /**
   * End of a micro-batch in which the key had rows: applies the proposal (counting an attempted
   * regression) and the floors, and records the arrival: `arrivalMs`, the max arrival time of the
   * key's rows on the arrival clock, else the processing time `nowMs`; never moving back. Returns
   * the watermark.
   */
  def advanceWithRows(proposal: Long, nowMs: Long, globalWatermark: Long, arrivalMs: Long): Long = {
    if (proposal != Undefined) {
      if (record.watermark != Undefined && proposal < record.watermark) record.regressions += 1
      raise(proposal)
    }
    raise(floor(nowMs, globalWatermark))
    record.lastArrivalMs = max(record.lastArrivalMs, arrivalMs)
    record.arrivalWatermark = record.watermark
    record.quietSinceMs = NoArrival
    record.watermark
  }

  /** Without rows (a timer): a changed proposal (e.g. a source went idle) and the floors. */
  def advanceWithoutRows(proposal: Long, nowMs: Long, globalWatermark: Long): Long = {
    raise(proposal)
    raise(floor(nowMs, globalWatermark))
    record.watermark
  }

  /** The event-time proposal `max event time - lateness` (Undefined before the first row). */
  def proposal(latenessMicros: Long): Long =
    if (record.maxEventTime == Undefined) Undefined else saturatingMinus(record.maxEventTime, latenessMicros)

  /**
   * Raises the watermark without counting (idle_timeout: windows emitted because the key went
   * idle are final, so the watermark moves past them and their rows are late from then on).
   */
  def raise(candidate: Long): Unit = if (candidate > record.watermark) record.watermark = candidate
}

/** One key's watermark record, as kept in the state store (see state.KeyState). */
private[keyedwatermarks] final class KeyRecord(
    var maxEventTime: Long,
    var watermark: Long,
    var arrivalWatermark: Long,
    var lastArrivalMs: Long,
    var latenessMicros: Long,
    var lateRows: Long,
    var regressions: Long,
    /**
     * idle_timeout: the processing time (ms) since which the idle key has had no open window
     * left (it is forgotten idle_timeout later); [[HeldWatermark.NoArrival]] otherwise.
     */
    var quietSinceMs: Long) {
  /** closing='fleet': the key's learnt skew ([[FleetFloor]]; Undefined until learnt). */
  var fleetSkew: Long = HeldWatermark.Undefined
  /** closing='fleet': Spark's global watermark when the skew was last learnt (FleetFloor.learn). */
  var fleetReference: Long = HeldWatermark.Undefined
}

private[keyedwatermarks] object HeldWatermark {
  /** Sentinel for "no watermark yet": below every real watermark. */
  val Undefined: Long = Long.MinValue
  val NoArrival: Long = Long.MinValue

  /** A key's record before its first row (or after it left state). */
  def freshRecord(latenessMicros: Long): KeyRecord =
    new KeyRecord(Undefined, Undefined, Undefined, NoArrival, latenessMicros, 0L, 0L, NoArrival)

  @inline def max(a: Long, b: Long): Long = if (a > b) a else b

  def saturatingMinus(a: Long, b: Long): Long = {
    if (a == Undefined) return Undefined
    val r = a - b
    if (((a ^ b) & (a ^ r)) < 0) Long.MinValue + 1 else r
  }
}

/** When a window (by its end) is closed for a key's watermark: `end <= watermark`. */
private[keyedwatermarks] object ClosedWindows {
  /** Closed: the watermark is defined and has reached the window's end. */
  def closedBy(windowEnd: Long, watermark: Long): Boolean =
    watermark != HeldWatermark.Undefined && windowEnd <= watermark
}
