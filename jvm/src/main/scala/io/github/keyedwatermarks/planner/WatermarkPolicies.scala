package io.github.keyedwatermarks.planner

import io.github.keyedwatermarks.spec.{
  Closing, DefaultSkew, IdleClock, KeyClock, KeyLateness, SkewOf, Unbounded, WatermarkSpec
}
import io.github.keyedwatermarks.watermark.{
  AdaptiveLateness, ArrivalClock, ColumnLateness, FixedLateness, FleetFloor, GlobalWatermarkFloor, IdleAdvanceFloor,
  IdleRule, LatenessSource, ProcessingTimeClock, ProcessingTimeFloor, Proposal, SkewFloor, SourcePolicy, WatermarkPolicy
}

/** The engine's watermark policy for a [[WatermarkSpec]] (what the operator reads on executors). */
private[keyedwatermarks] object WatermarkPolicies {

  /**
   * The options as components, the default skew bound resolved (see
   * [[WatermarkSpec.DefaultMaxSkewMicros]]). Call after [[SpecChecks.watermark]] (which rejects
   * the combinations that cannot run in one Spark time mode).
   */
  def of(w: WatermarkSpec): WatermarkPolicy = {
    val source = latenessSource(w.keyLateness)
    val proposal =
      if (w.clock == KeyClock.ProcessingTime || w.closing != Closing.Keyed) Proposal.ClockOnly
      else w.sources.fold[Proposal](Proposal.OwnRows(source)) { s =>
        Proposal.MinOfSources(source, SourcePolicy(s.expected.distinct, s.idleTimeout.map(_.millis)))
      }
    val skew = w.maxSkew match {
      case SkewOf(micros) => Some(micros)
      case Unbounded => None
      // Processing-time policies bound state with their own timers (and cannot follow Spark's
      // event-time watermark in the same query); closing='global' is Spark's watermark itself.
      // real_time: Spark's global watermark moves only between real-time batches (docs/semantics.md).
      case DefaultSkew =>
        if (w.followsOwnClock || w.closing == Closing.Global || w.realTime) None
        else Some(WatermarkSpec.DefaultMaxSkewMicros)
    }
    // The idle options' clock: the arrival clock (arrival_time) unless the wall clock was named.
    val idleClock = w.idleClockInForce match {
      case IdleClock.Arrival => ArrivalClock
      case IdleClock.ProcessingTime => ProcessingTimeClock
    }
    val floors = Seq(
      w.clock match {
        case KeyClock.ProcessingTime => Some(ProcessingTimeFloor(w.lateness.micros))
        case KeyClock.EventTime => None
      },
      w.closing match {
        case Closing.Global => Some(GlobalWatermarkFloor)
        case Closing.Keyed | Closing.Fleet => None
      },
      skew.map(SkewFloor(_, w.lateness.micros)),
      // closing='fleet': the skew bound above (the default hour unless set) also bounds the learnt skew.
      skew.filter(_ => w.closing == Closing.Fleet).map(FleetFloor(_, w.lateness.micros)),
      w.idleTimeout.filter(_ => w.advanceWhenIdle).map(t => IdleAdvanceFloor(t.millis, idleClock))).flatten
    val idle = w.idleTimeout.map { t =>
      if (w.advanceWhenIdle) IdleRule.AdvanceWhenIdle(t.millis) else IdleRule.EmitWhenIdle(t.millis)
    }
    WatermarkPolicy(w.lateness.micros, proposal, floors, idle, w.maxAheadMicros, w.stuckAfterMicros, idleClock)
  }

  /** Where each key's lateness comes from. */
  def latenessSource(keyLateness: KeyLateness): LatenessSource = keyLateness match {
    case KeyLateness.Fixed => FixedLateness
    case KeyLateness.ByColumn(_) | KeyLateness.ByKey(_) => ColumnLateness
    case KeyLateness.Adaptive(quantile, min, max, relativeError) =>
      AdaptiveLateness(quantile, min.micros, max.micros, relativeError)
  }
}
