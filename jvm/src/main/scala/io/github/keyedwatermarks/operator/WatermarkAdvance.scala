package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow

import io.github.keyedwatermarks.partials.PartialLayout
import io.github.keyedwatermarks.state.KeyState
import io.github.keyedwatermarks.watermark._

/**
 * One key's watermark across one micro-batch (or timer): takes the key's record, applies the
 * policy's clock floors at the start, collects what the batch's partials tell the policy
 * (max event time, per-row lateness, event times for the adaptive sketch, per-source maxima,
 * arrival times), and proposes the new watermark at the end. All state access for the watermark
 * is here. `nowMs` is the idle clock's now: Spark's global watermark on the arrival time (the
 * arrival clock) or the batch's processing time (see [[IdleClockNow]]).
 */
private[operator] final class WatermarkAdvance(
    policy: WatermarkPolicy, state: KeyState, val record: KeyRecord, layout: PartialLayout, nowMs: Long,
    globalWatermark: Long) {

  val watermark = new HeldWatermark(policy, record)
  /** `wm_N(k)`: the watermark at the start of the batch, after the clock floors. */
  val atStart: Long = watermark.applyFloors(nowMs, globalWatermark)

  private var batchLateness = Long.MinValue
  private val eventTimes = mutable.ArrayBuilder.make[Long]
  private val sourceMax = mutable.HashMap.empty[String, Long]
  private var sawRows = false
  // The arrival clock: the max arrival time (micros) of the key's rows, overall and per source.
  private var batchArrival = Long.MinValue
  private val sourceArrival = mutable.HashMap.empty[String, Long]
  private val regressionsBefore = record.regressions
  /** closing='fleet': the key's max event time before the batch (the skew is learnt when it moves). */
  private val maxBefore = record.maxEventTime

  def observe(partial: InternalRow): Unit = {
    sawRows = true
    val maxT = partial.getLong(layout.maxEventTime)
    watermark.observe(maxT)
    val arrival = if (layout.arrival >= 0) partial.getLong(layout.arrival) else Long.MinValue
    if (arrival > batchArrival) batchArrival = arrival
    if (layout.lateness >= 0) batchLateness = math.max(batchLateness, partial.getLong(layout.lateness))
    if (layout.eventTimes >= 0) {
      val ts = partial.getArray(layout.eventTimes)
      var i = 0
      while (i < ts.numElements()) { eventTimes += ts.getLong(i); i += 1 }
    }
    if (layout.source >= 0) {
      val s = partial.getUTF8String(layout.source).toString
      sourceMax.update(s, math.max(sourceMax.getOrElse(s, Long.MinValue), maxT))
      if (layout.arrival >= 0) sourceArrival.update(s, math.max(sourceArrival.getOrElse(s, Long.MinValue), arrival))
    }
  }

  /** Ends the batch: the policy's proposal, then the floors. Returns the new watermark. */
  def finish(): Long =
    if (sawRows) {
      policy.fleet.foreach(_.learn(record, maxBefore, globalWatermark))
      watermark.advanceWithRows(proposal(withRows = true), nowMs, globalWatermark, arrivalMs(batchArrival))
    } else watermark.advanceWithoutRows(proposal(withRows = false), nowMs, globalWatermark)

  /**
   * An arrival in the idle clock's milliseconds: on the arrival clock the max arrival time of
   * rows (micros, truncated to ms), at least the clock as it stands (so also when every one was
   * null: Long.MinValue), else the processing time.
   */
  private def arrivalMs(maxArrivalMicros: Long): Long =
    if (layout.arrival < 0 || maxArrivalMicros == Long.MinValue) nowMs
    else math.max(nowMs, Math.floorDiv(maxArrivalMicros, 1000L))

  /** Whether this batch's proposal was held back (an attempted regression). */
  def regressed: Boolean = record.regressions > regressionsBefore

  private def keyLateness(source: LatenessSource, withRows: Boolean): Long = source match {
    case FixedLateness => policy.latenessMicros
    case ColumnLateness =>
      // A negative value never gets here: the input counts it as an invalid row (input.InvalidRows).
      if (withRows && batchLateness != Long.MinValue) record.latenessMicros = batchLateness
      record.latenessMicros
    case a: AdaptiveLateness =>
      if (withRows) {
        val sketch = state.loadSketch(a.relativeError)
        val max = record.maxEventTime
        eventTimes.result().foreach(t => sketch.insert((max - t).toDouble))
        sketch.quantile(a.quantile).foreach { q =>
          record.latenessMicros = math.min(a.maxMicros, math.max(a.minMicros, math.round(q)))
        }
        state.storeSketch(sketch)
      }
      record.latenessMicros
  }

  private def proposal(withRows: Boolean): Long = policy.proposal match {
    case Proposal.ClockOnly => HeldWatermark.Undefined
    case Proposal.OwnRows(source) => watermark.proposal(keyLateness(source, withRows))
    case Proposal.MinOfSources(source, sp) =>
      val lateness = keyLateness(source, withRows)
      val map = state.sources.get // registered by KeyState for this proposal
      // On the arrival clock a source's idleness is decided on its last arrival before the batch
      // (as a no-data batch at the same clock would decide it); on the wall clock, after it.
      val seenBefore = mutable.HashMap.empty[String, Long]
      sourceMax.foreach { case (s, maxT) =>
        val previous = map.getValue(s)
        val kept = if (previous == null) maxT else math.max(previous.getLong(0), maxT)
        val seen = if (previous == null) Long.MinValue else previous.getLong(1)
        if (previous != null && policy.usesArrivalClock) seenBefore.update(s, seen)
        map.updateValue(s, Row(kept, math.max(seen, arrivalMs(sourceArrival.getOrElse(s, Long.MinValue)))))
      }
      sourceProposal(sp,
        map.iterator().map { case (s, r) => (s, r.getLong(0), seenBefore.getOrElse(s, r.getLong(1))) }.toList,
        lateness)
  }

  /** Min of inputs over the key's sources that are not idle (max over all if all are idle). */
  private def sourceProposal(sp: SourcePolicy, sources: List[(String, Long, Long)], lateness: Long): Long = {
    val seen = sources.map(_._1).toSet
    if (!sp.expected.forall(seen.contains)) return HeldWatermark.Undefined
    val active = sp.idleTimeoutMillis match {
      case Some(t) => sources.filter(s => nowMs - s._3 < t)
      case None => sources
    }
    val marks = (if (active.nonEmpty) active else sources).map(s => HeldWatermark.saturatingMinus(s._2, lateness))
    if (marks.isEmpty) HeldWatermark.Undefined
    else if (active.nonEmpty) marks.min
    else marks.max
  }

  /** Processing times at which a source of this key turns idle (so its watermark may jump). */
  def sourceIdleTimes: Seq[Long] = (policy.proposal.sourceIdleTimeoutMillis, state.sources) match {
    case (Some(t), Some(map)) =>
      map.iterator().map(_._2.getLong(1) + t).filter(_ > nowMs).toList
    case _ => Nil
  }
}
