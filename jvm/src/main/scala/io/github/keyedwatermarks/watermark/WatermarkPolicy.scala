package io.github.keyedwatermarks.watermark

/**
 * How every key's watermark is computed, fixed when the query is defined (see
 * docs/semantics.md, "Watermark policies"). All times are microseconds except the
 * processing-time timeouts, which are milliseconds like Spark's batch timestamps.
 *
 * @param latenessMicros       the fixed lateness `L`, and the default for per-key lateness
 * @param lateness             where a key's lateness comes from
 * @param processingTime       `wm(k) = processing time - L` instead of event time
 * @param idleTimeoutMillis    a key silent this long is idle (see `advanceWhenIdle`)
 * @param advanceWhenIdle      an idle key's watermark advances with the wall clock, keeping
 *                             its lag; otherwise an idle key's windows are all emitted and its
 *                             state is dropped
 * @param maxSkewMicros        a key's watermark is held at most this far behind Spark's global
 *                             watermark
 * @param globalClosing        every key uses Spark's global watermark (`withWatermark`)
 * @param sources              min of inputs: the watermark is kept per (key, source)
 */
final case class WatermarkPolicy(
    latenessMicros: Long,
    lateness: LatenessSource = FixedLateness,
    processingTime: Boolean = false,
    idleTimeoutMillis: Option[Long] = None,
    advanceWhenIdle: Boolean = false,
    maxSkewMicros: Option[Long] = None,
    globalClosing: Boolean = false,
    sources: Option[SourcePolicy] = None) {

  /** Spark's global watermark is needed (EventTime mode, `withWatermark` on the input). */
  def usesGlobalWatermark: Boolean = maxSkewMicros.isDefined || globalClosing

  /** Processing-time timers are needed (ProcessingTime mode). */
  def usesProcessingTimers: Boolean =
    processingTime || idleTimeoutMillis.isDefined || sources.exists(_.idleTimeoutMillis.isDefined)

  /** Rejects combinations that cannot run in one Spark time mode, naming the options. */
  def validate(): WatermarkPolicy = {
    def fail(msg: String) = throw new IllegalArgumentException(msg)
    if (usesGlobalWatermark && usesProcessingTimers) fail(
      "max_skew / closing='global' follow Spark's global event-time watermark and cannot be combined with " +
        "idle_timeout, clock='processing_time' or source_idle_timeout, which need processing-time timers")
    if (advanceWhenIdle && idleTimeoutMillis.isEmpty) fail("advance_when_idle: needs idle_timeout")
    if (globalClosing && (lateness != FixedLateness || sources.isDefined || maxSkewMicros.isDefined)) fail(
      "closing='global' uses Spark's one global watermark: per-key, adaptive lateness, sources and max_skew do not apply")
    if (processingTime && (lateness != FixedLateness || sources.isDefined)) fail(
      "clock='processing_time': the watermark follows the wall clock; per-key/adaptive lateness and sources do not apply")
    this
  }
}

/** Where a key's lateness comes from. */
sealed trait LatenessSource extends Serializable

/** The same `L` for every key. */
case object FixedLateness extends LatenessSource

/**
 * From a column of the input (microseconds after projection; null means the default `L`): a
 * key's lateness is the largest value among its rows of its latest micro-batch.
 */
case object ColumnLateness extends LatenessSource

/**
 * Learnt per key: the `quantile` of how far the key's rows trail its max event time (at the
 * end of the row's micro-batch), from a bounded quantile sketch, clamped to [min, max].
 */
final case class AdaptiveLateness(quantile: Double, minMicros: Long, maxMicros: Long, relativeError: Double)
  extends LatenessSource {
  require(quantile > 0 && quantile <= 1, s"quantile must be in (0, 1], got $quantile")
  require(minMicros >= 0 && minMicros <= maxMicros, s"need 0 <= min <= max, got $minMicros, $maxMicros")
}

/**
 * Min of inputs: `expected` sources (possibly empty: the sources seen so far) must all have
 * reported before the key has a watermark; a source silent for `idleTimeoutMillis` stops
 * holding its key back.
 */
final case class SourcePolicy(expected: Seq[String], idleTimeoutMillis: Option[Long]) extends Serializable
