package io.github.keyedwatermarks.spec

import org.apache.spark.sql.Column

/**
 * The per-key watermark part of a query, as the user chose it: keys, event time, lateness and
 * the policy options (docs/semantics.md, "Watermark policies"). Built by the Scala API
 * ([[io.github.keyedwatermarks.KeyedWatermarks]]) or from string options
 * ([[QueryOptions]]: Python, Spark Connect); every rule about which options combine lives in
 * [[validateCombination]] and, against the input, planner.SpecChecks.
 */
final case class WatermarkSpec(
    keys: Seq[String],
    eventTime: String,
    lateness: DurationOption,
    keyLateness: KeyLateness = KeyLateness.Fixed,
    clock: KeyClock = KeyClock.EventTime,
    idleTimeout: Option[DurationOption] = None,
    advanceWhenIdle: Boolean = false,
    maxSkew: SkewBound = DefaultSkew,
    closing: Closing = Closing.Keyed,
    sources: Option[SourcesSpec] = None,
    maxAheadMicros: Option[Long] = Some(WatermarkSpec.DefaultMaxAheadMicros),
    stuckAfterMicros: Long = WatermarkSpec.DefaultStuckAfterMicros,
    /** The stage's name in its metrics (default: see planner.KeyedStages.stageName). */
    stageName: Option[String] = None,
    /**
     * Per-key deduplication: a row of a key whose values of these columns were already seen
     * for the key, within the key's horizon, is dropped and counted (docs/semantics.md,
     * "Deduplication"). Empty: off.
     */
    dedup: Seq[String] = Nil,
    /**
     * Option `metrics`: "keys" (default) adds the per-key metrics (keys in the batch, new,
     * released, watermark lag quantiles, stuck keys) to the per-batch output counts; "counts"
     * keeps only the counts (windows emitted, late rows, held watermarks), so the operator
     * emits no per-key metrics row and the output observation has 3 aggregates instead of 14.
     */
    keyMetrics: Boolean = true,
    /**
     * Option `arrival_time`: each row's arrival (ingestion) time, a TIMESTAMP column; the arrival
     * clock of the idle options (docs/semantics.md, "Idle keys").
     */
    arrivalTime: Option[Column] = None,
    /** Option `idle_clock` as the user set it (None: the default, see [[idleClockInForce]]). */
    idleClock: Option[IdleClock] = None,
    /**
     * Option `real_time`: the stage is planned for Spark's real-time mode (docs/semantics.md,
     * "Real-time mode"): no partial aggregation before the shuffle, each row checked against its
     * key's watermark as it stands before that row and the windows it passes written at once.
     */
    realTime: Boolean = false,
    /** Whether option `metrics` was set (real_time refuses metrics='keys': see [[validateCombination]]). */
    metricsSet: Boolean = false) {

  /** The idle options that are set (idle_timeout, source_idle_timeout; advance_when_idle needs the first). */
  private[keyedwatermarks] def idleOptions: Seq[String] =
    idleTimeout.map(_ => "idle_timeout").toSeq ++ sources.flatMap(_.idleTimeout).map(_ => "source_idle_timeout")

  /** The clock the idle options follow: the wall clock with clock='processing_time', else idle_clock (default arrival). */
  private[keyedwatermarks] def idleClockInForce: IdleClock =
    if (clock == KeyClock.ProcessingTime) IdleClock.ProcessingTime else idleClock.getOrElse(IdleClock.Arrival)

  /** Idle options on the arrival clock: Spark's global watermark is then the arrival time. */
  private[keyedwatermarks] def idleOnArrival: Boolean =
    idleOptions.nonEmpty && idleClockInForce == IdleClock.Arrival

  /** The options that follow the wall clock (processing-time timers). */
  private[keyedwatermarks] def followsWallClock: Boolean =
    clock == KeyClock.ProcessingTime || (idleOptions.nonEmpty && idleClockInForce == IdleClock.ProcessingTime)

  /**
   * The options that follow a clock of their own (the wall clock, or the arrival clock as the
   * query's global watermark): the skew bound's default does not apply, and what follows
   * Spark's global watermark on event time cannot be combined with them.
   */
  private[keyedwatermarks] def followsOwnClock: Boolean = followsWallClock || idleOnArrival

  /** Rejects option combinations that cannot run in one Spark time mode, naming the options. */
  private[keyedwatermarks] def validateCombination(): Unit = {
    def fail(msg: String): Nothing = OptionError(msg)
    if (clock == KeyClock.ProcessingTime && idleClock.contains(IdleClock.Arrival)) fail(
      "idle_clock='arrival' cannot be combined with clock='processing_time': that watermark follows the wall " +
        "clock, and so do its idle options (leave idle_clock out, or use clock='event_time')")
    val ownClock =
      if (idleOnArrival) s"${idleOptions.mkString(" and ")} on the arrival clock, which makes the arrival time " +
        "the query's global watermark (Spark keeps one per query)"
      else "idle_timeout, clock='processing_time' or source_idle_timeout, which need processing-time timers"
    if (maxSkew.isInstanceOf[SkewOf] && followsOwnClock) fail(
      s"max_skew follows Spark's global event-time watermark and cannot be combined with $ownClock " +
        "(these bound state with their own timers instead)")
    if (closing == Closing.Global && followsOwnClock) fail(
      s"closing='global' follows Spark's global event-time watermark and cannot be combined with $ownClock")
    if (advanceWhenIdle && idleTimeout.isEmpty) fail("advance_when_idle: needs idle_timeout")
    val perKey = keyLateness != KeyLateness.Fixed || sources.isDefined
    if (closing == Closing.Global && (perKey || maxSkew.isInstanceOf[SkewOf])) fail(
      "closing='global' uses Spark's one global watermark: per-key, adaptive lateness, sources and max_skew do not apply")
    if (closing == Closing.Fleet && followsOwnClock) fail(
      s"closing='fleet' follows Spark's global event-time watermark and cannot be combined with $ownClock")
    if (closing == Closing.Fleet && (keyLateness != KeyLateness.Fixed || sources.isDefined)) fail(
      "closing='fleet': each key learns its skew behind Spark's global watermark; per-key, adaptive lateness " +
        "and sources do not apply")
    if (closing == Closing.Fleet && maxSkew == Unbounded) fail(
      "closing='fleet': max_skew bounds the learnt skew and how long a key stays in state; it cannot be 'unbounded'")
    if (clock == KeyClock.ProcessingTime && (keyLateness != KeyLateness.Fixed || sources.isDefined)) fail(
      "clock='processing_time': the watermark follows the wall clock; per-key/adaptive lateness and sources do not apply")
    idleOptions.headOption.filter(_ => idleOnArrival && arrivalTime.isEmpty).foreach { option =>
      fail(s"$option: idleness is measured on the stream's arrival clock (idle_clock='arrival', the default), " +
        "which needs arrival_time: the TIMESTAMP column of each row's arrival time, e.g. Kafka's 'timestamp', " +
        "the file source's '_metadata.file_modification_time' or a column of your own; or set " +
        "idle_clock='processing_time' to measure it on the query's wall clock (not outage-safe: a query that was " +
        "down or is catching up sees every key idle)")
    }
    if (realTime) validateRealTime()
    if (arrivalTime.isDefined && idleOptions.nonEmpty && !idleOnArrival) fail(
      "arrival_time: not read with idle_clock='processing_time' or clock='processing_time' (the idle " +
        "options then follow the wall clock); drop it, or use the arrival clock (idle_clock='arrival')")
  }

  /**
   * real_time: only what runs row by row in Spark's real-time mode, on the key's own rows
   * (docs/semantics.md, "Real-time mode"). Spark's global watermark moves only between real-time
   * batches (minutes), and the clocks' timers are not part of the real-time plan.
   */
  private def validateRealTime(): Unit = {
    def fail(option: String, why: String): Nothing = OptionError(
      s"$option: not supported with real_time=True ($why; docs/semantics.md, \"Real-time mode\")")
    val globalWatermark = "it follows Spark's global watermark, which in real-time mode moves only between " +
      "real-time batches"
    if (maxSkew.isInstanceOf[SkewOf]) fail("max_skew", globalWatermark + "; leave it out or set 'unbounded'")
    if (closing != Closing.Keyed) fail(s"closing='${closing.name}'", globalWatermark)
    if (clock != KeyClock.EventTime) fail(s"clock='${clock.name}'", "it needs processing-time timers")
    idleOptions.headOption.foreach(o => fail(o, "the idle options need timers on the arrival or the wall clock"))
    if (arrivalTime.isDefined) fail("arrival_time", "only the idle options read it")
    if (dedup.nonEmpty) fail("dedup", "not planned for real-time mode yet")
    if (metricsSet && keyMetrics) fail("metrics='keys'",
      "the per-key metrics are passed on by an operator Spark does not allow in real-time mode; the counts " +
        "(metrics='counts', the default with real_time) are reported")
  }

  /**
   * The rules of a complete query (checked when it is planned, not at each step of the Scala
   * builder, which may set arrival_time before the idle options that read it).
   */
  private[keyedwatermarks] def validateQuery(): Unit =
    if (arrivalTime.isDefined && idleOptions.isEmpty) OptionError(
      "arrival_time: only the idle options read it (idle_timeout, source_idle_timeout); set one, or drop arrival_time")
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

  /** metrics: "keys" (the per-key metrics too, the default) or "counts" (only the counts). */
  def keyMetrics(text: String): Boolean = OptionError.choice("metrics", text, Seq("keys", "counts"))(identity) == "keys"
}

/** Option `clock`: what a key's watermark follows (one choice). */
sealed abstract class KeyClock(val name: String)

object KeyClock {
  /** The key's own rows: its max event time minus its lateness (the default). */
  case object EventTime extends KeyClock("event_time")

  /** The wall clock: the micro-batch's processing time minus the lateness. */
  case object ProcessingTime extends KeyClock("processing_time")

  val All: Seq[KeyClock] = Seq(EventTime, ProcessingTime)

  def parse(text: String): KeyClock = OptionError.choice("clock", text, All)(_.name)
}

/**
 * Option `closing`: which watermark closes a key's windows (docs/semantics.md, "Watermark
 * policies"). One choice, so that two closings cannot be set at once.
 */
sealed abstract class Closing(val name: String)

object Closing {
  /** Each key's own watermark (the default). */
  case object Keyed extends Closing("keyed")

  /** Spark's one global watermark for every key (`withWatermark(eventTime, lateness)`). */
  case object Global extends Closing("global")

  /** Spark's global watermark behind each key's own learnt skew ("Fleet closing"). */
  case object Fleet extends Closing("fleet")

  val All: Seq[Closing] = Seq(Keyed, Global, Fleet)

  def parse(text: String): Closing = OptionError.choice("closing", text, All)(_.name)
}

/** Option `idle_clock`: the clock of the idle options (docs/semantics.md, "Idle keys"). One choice. */
sealed abstract class IdleClock(val name: String)

object IdleClock {
  /** The stream's arrival time (arrival_time): outage-safe, the default. */
  case object Arrival extends IdleClock("arrival")

  /** The micro-batch's processing time: the wall clock, by name only (not outage-safe). */
  case object ProcessingTime extends IdleClock("processing_time")

  val All: Seq[IdleClock] = Seq(Arrival, ProcessingTime)

  def parse(text: String): IdleClock = OptionError.choice("idle_clock", text, All)(_.name)
}

/** Where each key's lateness comes from: one choice, so two ways cannot be combined. */
sealed trait KeyLateness

object KeyLateness {
  /** The query's `lateness` for every key. */
  case object Fixed extends KeyLateness

  /** A per-row duration column (null: the default lateness). */
  final case class ByColumn(column: Column) extends KeyLateness

  /** A duration per key value (as a string); other keys use the default lateness. */
  final case class ByKey(mapping: Map[String, DurationOption]) extends KeyLateness

  /** Learnt per key from its out-of-orderness (a quantile within [min, max]). */
  final case class Adaptive(quantile: Double, min: DurationOption, max: DurationOption, relativeError: Double)
      extends KeyLateness {
    if (!(quantile > 0 && quantile <= 1))
      OptionError(s"adaptive_lateness.quantile: must be in (0, 1], got $quantile")
    if (!(relativeError > 0 && relativeError < 1)) OptionError(
      s"adaptive_lateness.relative_error: must be in (0, 1), got $relativeError")
    if (min.micros < 0) OptionError(s"${min.option}: must not be negative, got '${min.text}'")
    if (max.micros < 0) OptionError(s"${max.option}: must not be negative, got '${max.text}'")
    if (min.micros > max.micros) OptionError(
      s"${min.option} '${min.text}' is above ${max.option} '${max.text}'")
  }

  object Adaptive {
    val DefaultQuantile = 0.99
    val DefaultMin = "0 seconds"
    val DefaultMax = "1 hour"
    val DefaultRelativeError = 0.01
  }
}

/** Min of inputs: the watermark per (key, source); see docs/semantics.md. */
final case class SourcesSpec(column: Column, expected: Seq[String] = Nil, idleTimeout: Option[DurationOption] = None)
