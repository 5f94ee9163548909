package io.github.keyedwatermarks.watermark

/**
 * How every key's watermark is computed (docs/semantics.md, "Watermark policies"), as three
 * kinds of component, each a sealed choice with its own small file:
 *  - the [[Proposal]]: what the key's own rows propose (max event time minus its lateness, the
 *    min over its sources, or nothing: the watermark follows a clock only);
 *  - the [[ClockFloor]]s: clocks that raise the watermark without rows (processing time,
 *    Spark's global watermark directly or behind a skew bound, the wall clock of an idle key),
 *    each saying which clock it follows and when it will reach a given watermark (its timer);
 *  - the [[IdleRule]], if any: what happens to a key silent for a processing-time timeout.
 * The operator asks the components, never a flag; a new policy is a new component the
 * compiler's exhaustiveness checks point to. Which user options combine into which components
 * is decided once, by spec.WatermarkSpec. Times are microseconds except processing times and
 * timeouts, which are milliseconds like Spark's batch timestamps.
 *
 * @param latenessMicros   the default lateness `L` (a key's lateness before its policy learns one)
 * @param proposal         what a key's rows propose
 * @param floors           the clock floors, in no particular order (the watermark takes their max)
 * @param idle             the idle-key rule (idle_timeout), if any
 * @param maxAheadMicros   rows whose event time is further ahead of the micro-batch's processing
 *                         time are invalid (None: no bound): a row from a device whose clock says
 *                         9999 moves neither its key's watermark nor Spark's global watermark
 * @param stuckAfterMicros the lag behind Spark's global watermark from which a key counts as
 *                         stuck in the per-batch metrics
 */
private[keyedwatermarks] final case class WatermarkPolicy(
    latenessMicros: Long,
    proposal: Proposal = Proposal.OwnRows(FixedLateness),
    floors: Seq[ClockFloor] = Nil,
    idle: Option[IdleRule] = None,
    maxAheadMicros: Option[Long] = None,
    stuckAfterMicros: Long = Long.MaxValue,
    idleClock: Clock = ProcessingTimeClock) {
  require(idleClock != EventTimeClock, "the idle clock is the arrival clock or the wall clock")

  /** Spark's global watermark on event time is needed (EventTime mode, `withWatermark` on the partials). */
  def usesGlobalWatermark: Boolean = floors.exists(_.clock == EventTimeClock)

  /** The idle rules (idle_timeout, source_idle_timeout) are in use, on [[idleClock]]. */
  def hasIdleRules: Boolean = idle.isDefined || proposal.sourceIdleTimeoutMillis.isDefined

  /** The arrival clock is needed (EventTime mode, `withWatermark` on the arrival time). */
  def usesArrivalClock: Boolean = hasIdleRules && idleClock == ArrivalClock

  /** Processing-time timers are needed (ProcessingTime mode). */
  def usesProcessingTimers: Boolean =
    floors.exists(_.clock == ProcessingTimeClock) || (hasIdleRules && idleClock == ProcessingTimeClock)

  /** Timers on the idle clock or the wall clock (set by the operator's scheduleProcessingTimer). */
  def usesClockTimers: Boolean = usesProcessingTimers || usesArrivalClock

  /**
   * A key with no open window can leave state when a floor covers a returning key: it then
   * starts from a floor at least as high as the watermark it left with, because its windows
   * could only all close through a floor that follows a clock every key shares, never through
   * its own rows (a key's latest window always ends after its max event time). An idle key's
   * wall-clock advance is its own: such keys are forgotten by the idle rule instead.
   */
  def releasesKeysWithoutWindows: Boolean = floors.exists(_.coversReturningKey)

  /**
   * Whether a key without open windows leaves state now (see [[releasesKeysWithoutWindows]]).
   * A floor applied only at the end of a batch ([[FleetFloor]]) can hold a key above the floor
   * it would return at: such a key stays until that floor has reached its watermark.
   */
  def releasable(record: KeyRecord, nowMs: Long, global: Long): Boolean =
    releasesKeysWithoutWindows && (floors.forall(_.appliesAtStart) || {
      val back = returningFloor(record, nowMs, global)
      back != HeldWatermark.Undefined && record.watermark <= back
    })

  /** The floor a key returning after it left state starts from (the floors that cover it). */
  def returningFloor(record: KeyRecord, nowMs: Long, global: Long): Long =
    floors.filter(_.coversReturningKey).map(_.floor(record, nowMs, global)).foldLeft(HeldWatermark.Undefined)(math.max)

  /** closing='fleet': its floor (a val: the operator asks for every partial). */
  val fleet: Option[FleetFloor] = floors.collectFirst { case f: FleetFloor => f }

  }
