package io.github.keyedwatermarks.spec

import org.apache.spark.sql.{Column, DataFrame}

import io.github.keyedwatermarks.compat.SparkVersionCheck
import io.github.keyedwatermarks.input.{DurationColumn, InputPlan}
import io.github.keyedwatermarks.watermark.{AdaptiveLateness, ColumnLateness, DefaultSkew, FixedLateness,
  LatenessSource, SkewBound, SourcePolicy, WatermarkPolicy}

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
    maxAheadMicros: Option[Long] = Some(WatermarkPolicy.DefaultMaxAheadMicros),
    stuckAfterMicros: Long = WatermarkPolicy.DefaultStuckAfterMicros) {

  /** The engine's policy (what the operator reads on executors). */
  def policy: WatermarkPolicy = WatermarkPolicy(
    latenessMicros = lateness.micros,
    lateness = keyLateness.source,
    processingTime = processingTimeClock,
    idleTimeoutMillis = idleTimeout.map(_.millis),
    advanceWhenIdle = advanceWhenIdle,
    maxSkew = maxSkew,
    globalClosing = globalClosing,
    sources = sources.map(s => SourcePolicy(s.expected.distinct, s.idleTimeout.map(_.millis))),
    maxAheadMicros = maxAheadMicros,
    stuckAfterMicros = stuckAfterMicros)

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
      case KeyLateness.ByKey(_) if keys.size != 1 => fail(
        s"key_lateness: a mapping needs a single key column, got ${keys.mkString(", ")}; use a lateness column")
      case KeyLateness.Fixed | KeyLateness.ByKey(_) | _: KeyLateness.Adaptive => ()
    }
    sources.foreach(s => events.select(s.column)) // an unknown column fails here (AnalysisException)
    policy.validate() // which policy options combine: the engine's rule, stated once there
    input
  }

  def usesGlobalWatermark: Boolean = policy.usesGlobalWatermark
  def usesProcessingTimers: Boolean = policy.usesProcessingTimers
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
    if (!(quantile > 0 && quantile <= 1)) DurationOption.fail(s"adaptive_lateness.quantile: must be in (0, 1], got $quantile")
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
