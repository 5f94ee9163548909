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
 * @param maxSkew              how far a key's watermark may trail Spark's global watermark (see
 *                             [[SkewBound]]; by default [[WatermarkPolicy.DefaultMaxSkewMicros]]
 *                             unless a processing-time policy or closing='global' is used)
 * @param globalClosing        every key uses Spark's global watermark (`withWatermark`)
 * @param sources              min of inputs: the watermark is kept per (key, source)
 * @param maxAheadMicros       rows whose event time is further ahead of the micro-batch's
 *                             processing time are invalid (None: no bound), so that a row from a
 *                             device whose clock says 9999 moves neither its key's watermark nor
 *                             Spark's global watermark
 * @param stuckAfterMicros     the lag behind Spark's global watermark from which a key counts
 *                             as stuck in the per-batch metrics
 */
final case class WatermarkPolicy(
    latenessMicros: Long,
    lateness: LatenessSource = FixedLateness,
    processingTime: Boolean = false,
    idleTimeoutMillis: Option[Long] = None,
    advanceWhenIdle: Boolean = false,
    maxSkew: SkewBound = DefaultSkew,
    globalClosing: Boolean = false,
    sources: Option[SourcePolicy] = None,
    maxAheadMicros: Option[Long] = Some(WatermarkPolicy.DefaultMaxAheadMicros),
    stuckAfterMicros: Long = WatermarkPolicy.DefaultStuckAfterMicros) {

  /**
   * The skew bound in force: the chosen one, or the default one where it can apply. Processing-
   * time policies bound state with their own timers (and cannot follow Spark's event-time
   * watermark in the same query); closing='global' is Spark's watermark itself.
   */
  def maxSkewMicros: Option[Long] = maxSkew match {
    case SkewOf(micros) => Some(micros)
    case Unbounded => None
    case DefaultSkew =>
      if (usesProcessingTimers || globalClosing) None else Some(WatermarkPolicy.DefaultMaxSkewMicros)
  }

  /**
   * A key with no open window can leave state: a key returning later starts from a floor at
   * least as high as the watermark it left with, because its windows could only all close
   * through a floor that follows a clock every key shares (Spark's global watermark, or
   * processing time), never through its own rows (a key's latest window always ends after its
   * max event time). Idle advance is per key: such keys are forgotten by idle_timeout instead.
   */
  def releasesKeysWithoutWindows: Boolean = maxSkewMicros.isDefined || globalClosing || processingTime

  /** Spark's global watermark is needed (EventTime mode, `withWatermark` on the input). */
  def usesGlobalWatermark: Boolean = maxSkewMicros.isDefined || globalClosing

  /** Processing-time timers are needed (ProcessingTime mode). */
  def usesProcessingTimers: Boolean =
    processingTime || idleTimeoutMillis.isDefined || sources.exists(_.idleTimeoutMillis.isDefined)

  /** Rejects combinations that cannot run in one Spark time mode, naming the options. */
  def validate(): WatermarkPolicy = {
    def fail(msg: String) = throw new IllegalArgumentException(msg)
    if (maxSkew.isInstanceOf[SkewOf] && usesProcessingTimers) fail(
      "max_skew follows Spark's global event-time watermark and cannot be combined with " +
        "idle_timeout, clock='processing_time' or source_idle_timeout, which need processing-time timers " +
        "(they bound state by processing time instead)")
    if (globalClosing && usesProcessingTimers) fail(
      "closing='global' follows Spark's global event-time watermark and cannot be combined with " +
        "idle_timeout, clock='processing_time' or source_idle_timeout, which need processing-time timers")
    if (advanceWhenIdle && idleTimeoutMillis.isEmpty) fail("advance_when_idle: needs idle_timeout")
    if (globalClosing && (lateness != FixedLateness || sources.isDefined || maxSkew.isInstanceOf[SkewOf])) fail(
      "closing='global' uses Spark's one global watermark: per-key, adaptive lateness, sources and max_skew do not apply")
    if (processingTime && (lateness != FixedLateness || sources.isDefined)) fail(
      "clock='processing_time': the watermark follows the wall clock; per-key/adaptive lateness and sources do not apply")
    this
  }
}

object WatermarkPolicy {
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

  /** A duration string, or "unbounded" (None). */
  def maxAhead(text: String): Option[Long] =
    if (text != null && text.trim.equalsIgnoreCase("unbounded")) None
    else {
      val micros = io.github.keyedwatermarks.compat.SparkInternals.durationMicros("max_ahead", text)
      if (micros < 0) throw new IllegalArgumentException(s"max_ahead: must not be negative, got '$text'")
      Some(micros)
    }
}

/** How far a key's watermark may trail Spark's global watermark (docs/semantics.md, "Bounded skew"). */
sealed trait SkewBound extends Serializable

/** [[WatermarkPolicy.DefaultMaxSkewMicros]] where it applies (see [[WatermarkPolicy.maxSkewMicros]]). */
case object DefaultSkew extends SkewBound

/** No bound (`max_skew="unbounded"`): a silent key keeps its state and its last window forever. */
case object Unbounded extends SkewBound

object SkewBound {
  /** A duration string, or "unbounded" (no bound). */
  def parse(text: String): SkewBound =
    if (text != null && text.trim.equalsIgnoreCase("unbounded")) Unbounded
    else {
      val micros = io.github.keyedwatermarks.compat.SparkInternals.durationMicros("max_skew", text)
      if (micros < 0) throw new IllegalArgumentException(s"max_skew: must not be negative, got '$text'")
      SkewOf(micros)
    }
}

final case class SkewOf(micros: Long) extends SkewBound {
  require(micros >= 0, s"max_skew must not be negative, got $micros microseconds")
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
