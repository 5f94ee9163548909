package io.github.keyedwatermarks.spec

import org.apache.spark.sql.{Column, DataFrame}

import io.github.keyedwatermarks.compat.SparkVersionCheck
import io.github.keyedwatermarks.input.{DurationColumn, InputPlan}
import io.github.keyedwatermarks.watermark.{
  AdaptiveLateness, ColumnLateness, FixedLateness, GlobalWatermarkFloor, IdleAdvanceFloor, IdleRule, LatenessSource,
  ProcessingTimeFloor, Proposal, SkewFloor, SourcePolicy, WatermarkPolicy
}

/**
 * The per-key watermark part of a query, as the user chose it: keys, event time, lateness and
 * the policy options (docs/semantics.md, "Watermark policies"). Built by the Scala API
 * ([[io.github.keyedwatermarks.KeyedWatermarks]]) or from string options
 * ([[QueryOptions]]: Python, Spark Connect); every rule about which options combine lives in
 * [[validate]], once.
 */
final case class WatermarkSpec(
    keys: Seq[String],
    eventTime: String,
    lateness: DurationOption,
    keyLateness: KeyLateness = KeyLateness.Fixed,
    processingTimeClock: Boolean = false,
    idleTimeout: Option[DurationOption] = None,
    advanceWhenIdle: Boolean = false,
    maxSkew: SkewBound = DefaultSkew,
    globalClosing: Boolean = false,
    sources: Option[SourcesSpec] = None,
    maxAheadMicros: Option[Long] = Some(WatermarkSpec.DefaultMaxAheadMicros),
    stuckAfterMicros: Long = WatermarkSpec.DefaultStuckAfterMicros,
    /** The stage's name in its metrics (default: see planner.KeyedStages.stageName). */
    stageName: Option[String] = None) {

  /**
   * The engine's policy (what the operator reads on executors): the options as components, the
   * default skew bound resolved (see [[WatermarkSpec.DefaultMaxSkewMicros]]). Call after
   * [[validate]] (which rejects the combinations that cannot run in one Spark time mode).
   */
  def policy: WatermarkPolicy = {
    val source = keyLateness.source
    val proposal =
      if (processingTimeClock || globalClosing) Proposal.ClockOnly
      else sources.fold[Proposal](Proposal.OwnRows(source)) { s =>
        Proposal.MinOfSources(source, SourcePolicy(s.expected.distinct, s.idleTimeout.map(_.millis)))
      }
    val skew = maxSkew match {
      case SkewOf(micros) => Some(micros)
      case Unbounded => None
      // Processing-time policies bound state with their own timers (and cannot follow Spark's
      // event-time watermark in the same query); closing='global' is Spark's watermark itself.
      case DefaultSkew => if (followsWallClock || globalClosing) None else Some(WatermarkSpec.DefaultMaxSkewMicros)
    }
    val floors = Seq(
      if (processingTimeClock) Some(ProcessingTimeFloor(lateness.micros)) else None,
      if (globalClosing) Some(GlobalWatermarkFloor) else None,
      skew.map(SkewFloor(_, lateness.micros)),
      idleTimeout.filter(_ => advanceWhenIdle).map(t => IdleAdvanceFloor(t.millis))).flatten
    val idle = idleTimeout.map { t =>
      if (advanceWhenIdle) IdleRule.AdvanceWhenIdle(t.millis) else IdleRule.EmitWhenIdle(t.millis)
    }
    WatermarkPolicy(lateness.micros, proposal, floors, idle, maxAheadMicros, stuckAfterMicros)
  }

  /** The options that follow the wall clock (processing-time timers). */
  private def followsWallClock: Boolean =
    processingTimeClock || idleTimeout.isDefined || sources.exists(_.idleTimeout.isDefined)

  /** Rejects option combinations that cannot run in one Spark time mode, naming the options. */
  private def validateCombination(): Unit = {
    def fail(msg: String): Nothing = DurationOption.fail(msg)
    if (maxSkew.isInstanceOf[SkewOf] && followsWallClock) fail(
      "max_skew follows Spark's global event-time watermark and cannot be combined with " +
        "idle_timeout, clock='processing_time' or source_idle_timeout, which need processing-time timers " +
        "(they bound state by processing time instead)")
    if (globalClosing && followsWallClock) fail(
      "closing='global' follows Spark's global event-time watermark and cannot be combined with " +
        "idle_timeout, clock='processing_time' or source_idle_timeout, which need processing-time timers")
    if (advanceWhenIdle && idleTimeout.isEmpty) fail("advance_when_idle: needs idle_timeout")
    if (globalClosing && (keyLateness != KeyLateness.Fixed || sources.isDefined || maxSkew.isInstanceOf[SkewOf])) fail(
      "closing='global' uses Spark's one global watermark: per-key, adaptive lateness, sources and max_skew do not apply")
    if (processingTimeClock && (keyLateness != KeyLateness.Fixed || sources.isDefined)) fail(
      "clock='processing_time': the watermark follows the wall clock; per-key/adaptive lateness and sources do not apply")
  }

  /**
   * Checks the options against `events` (columns exist, types fit) and against each other
   * (`WatermarkPolicy.validate`), so that bad input fails before any query starts. Returns the
   * input plan.
   */
  def validate(events: DataFrame, streaming: Boolean = true): InputPlan = {
    // Every path (Scala API, py4j, Spark Connect) starts here: refuse a jar built for another Spark.
    SparkVersionCheck.requireBuiltForRunningSpark()
    def fail(msg: String): Nothing = DurationOption.fail(msg)
    if (lateness.micros < 0) fail(s"lateness: must not be negative, got '${lateness.text}'")
    val input = InputPlan.validate(events, keys, eventTime, streaming)
    keyLateness match {
      case KeyLateness.ByColumn(c) => DurationColumn.micros(events, c, "key_lateness")
      case KeyLateness.ByKey(_) if keys.size != 1 =>
        fail(
          s"key_lateness: a mapping needs a single key column, got ${keys.mkString(", ")}; use a lateness column")
      case KeyLateness.Fixed | KeyLateness.ByKey(_) | _: KeyLateness.Adaptive => ()
    }
    sources.foreach(s => events.select(s.column)) // an unknown column fails here (AnalysisException)
    validateCombination()
    input
  }
}

object WatermarkSpec {
  /**
   * The default skew bound: a key's watermark trails Spark's global watermark by at most an
   * hour (plus its own extra lateness). Keys of a fleet that report with minutes of delay or
   * clock offset keep their own watermark; a key silent for an hour of the fleet's event time
   * has its windows emitted and leaves state, so state holds the keys active in the last hour.
   */
  val DefaultMaxSkewMicros: Long = 3600L * 1000 * 1000

  /**
   * The default bound on how far ahead of processing time an event time may be: a day, far
   * beyond clock offsets and time zones mixed up, far below a device clock reset to 2099.
   */
  val DefaultMaxAheadMicros: Long = 24L * 3600 * 1000 * 1000

  /** A key whose watermark trails Spark's global watermark by more is "stuck" (a metric only). */
  val DefaultStuckAfterMicros: Long = 10L * 60 * 1000 * 1000

  /** max_ahead: a duration string, or "unbounded" (None). */
  def maxAhead(text: String): Option[Long] =
    if (text != null && text.trim.equalsIgnoreCase("unbounded")) None
    else Some(DurationOption.nonNegative("max_ahead", text).micros)
}

/** Where each key's lateness comes from: one choice, so two ways cannot be combined. */
sealed trait KeyLateness {
  def source: LatenessSource
}

object KeyLateness {
  /** The query's `lateness` for every key. */
  case object Fixed extends KeyLateness { def source: LatenessSource = FixedLateness }

  /** A per-row duration column (null: the default lateness). */
  final case class ByColumn(column: Column) extends KeyLateness { def source: LatenessSource = ColumnLateness }

  /** A duration per key value (as a string); other keys use the default lateness. */
  final case class ByKey(mapping: Map[String, DurationOption]) extends KeyLateness {
    def source: LatenessSource = ColumnLateness
  }

  /** Learnt per key from its out-of-orderness (a quantile within [min, max]). */
  final case class Adaptive(quantile: Double, min: DurationOption, max: DurationOption, relativeError: Double)
      extends KeyLateness {
    if (!(quantile > 0 && quantile <= 1))
      DurationOption.fail(s"adaptive_lateness.quantile: must be in (0, 1], got $quantile")
    if (!(relativeError > 0 && relativeError < 1)) DurationOption.fail(
      s"adaptive_lateness.relative_error: must be in (0, 1), got $relativeError")
    if (min.micros < 0) DurationOption.fail(s"${min.option}: must not be negative, got '${min.text}'")
    if (max.micros < 0) DurationOption.fail(s"${max.option}: must not be negative, got '${max.text}'")
    if (min.micros > max.micros) DurationOption.fail(
      s"${min.option} '${min.text}' is above ${max.option} '${max.text}'")
    def source: LatenessSource = AdaptiveLateness(quantile, min.micros, max.micros, relativeError)
  }
}

/** Min of inputs: the watermark per (key, source); see docs/semantics.md. */
final case class SourcesSpec(column: Column, expected: Seq[String] = Nil, idleTimeout: Option[DurationOption] = None)
