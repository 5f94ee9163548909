package io.github.keyedwatermarks

import org.apache.spark.sql.{Column, DataFrame}

import io.github.keyedwatermarks.planner.{KeyedPlanner, SpecChecks}
import io.github.keyedwatermarks.spec._
import io.github.keyedwatermarks.spec.{SkewBound, WatermarkSpec}

/**
 * The Scala API: per-key watermarks over a streaming DataFrame, then windows, then aggregates.
 * Each step returns an immutable value holding the query's spec ([[spec.KeyedQuerySpec]]) and
 * checks it against the input at once, so bad input fails before any query starts.
 *
 * {{{
 * import io.github.keyedwatermarks.KeyedWatermarks
 * val perDevice = KeyedWatermarks(events, Seq("device"), "ts", "5 seconds")
 *   .window("10 seconds")
 *   .agg(count("*").as("n"), avg("temp").as("avg_temp"))
 * }}}
 *
 * Python and Spark Connect reach the same planner through [[spec.QueryOptions]] (see
 * [[python.PythonAPI]]).
 */
object KeyedWatermarks {

  /**
   * `idleTimeout` here is on the arrival clock (the default idle clock), which needs an arrival
   * time: it is refused unless set through the builder (`withArrivalTime(...)` or
   * `withIdleClock("processing_time")`, then `withIdleTimeout(...)`).
   */
  def apply(
      events: DataFrame,
      keys: Seq[String],
      eventTime: String,
      lateness: String,
      idleTimeout: Option[String] = None): KeyedWatermark = {
    val spec = WatermarkSpec(keys, eventTime, DurationOption.nonNegative("lateness", lateness),
      idleTimeout = idleTimeout.map(DurationOption.positive("idle_timeout", _)))
    new KeyedWatermark(events, spec)
  }
}

/**
 * Per-key watermark settings over a stream; choose the policy (optional, see
 * docs/semantics.md "Watermark policies"), then the windows. Each `with...` returns a copy.
 */
final class KeyedWatermark private[keyedwatermarks] (events: DataFrame, val spec: WatermarkSpec) {
  SpecChecks.watermark(spec, events)

  private def copy(spec: WatermarkSpec): KeyedWatermark = new KeyedWatermark(events, spec)

  /**
   * Per-key lateness from a column: a duration per row (a Spark duration string such as
   * "5 minutes", a DAY TO SECOND interval or a CALENDAR interval without months); null uses
   * the default lateness. A key's lateness is the largest value among its rows of its latest
   * micro-batch.
   */
  def withLatenessColumn(lateness: Column): KeyedWatermark =
    copy(spec.copy(keyLateness = KeyLateness.ByColumn(lateness)))

  /** Per-key lateness from a mapping of key value (as a string) to a duration string. */
  def withLatenessMapping(mapping: Map[String, String]): KeyedWatermark = copy(spec.copy(keyLateness =
      KeyLateness.ByKey(mapping.map { case (k, d) => k -> DurationOption.nonNegative(s"key_lateness['$k']", d) })))

  /**
   * Adaptive lateness: per key, the `quantile` of how far its rows trail the key's max event
   * time, from a bounded sketch (Spark's QuantileSummaries, `relativeError`), within [min, max].
   */
  def withAdaptiveLateness(
      quantile: Double = KeyLateness.Adaptive.DefaultQuantile,
      min: String = KeyLateness.Adaptive.DefaultMin,
      max: String = KeyLateness.Adaptive.DefaultMax,
      relativeError: Double = KeyLateness.Adaptive.DefaultRelativeError): KeyedWatermark =
    copy(spec.copy(keyLateness = KeyLateness.Adaptive(quantile,
        DurationOption("adaptive_lateness.min", min), DurationOption("adaptive_lateness.max", max), relativeError)))

  /**
   * What each key's watermark follows (option `clock`): "event_time" (default: the key's own
   * rows) or "processing_time" (`wm(k) = processing time - lateness`, the batch's processing time).
   */
  def withClock(clock: String): KeyedWatermark = copy(spec.copy(clock = KeyClock.parse(clock)))

  /** `wm(k) = processing time - lateness` (the batch's processing time): `withClock("processing_time")`. */
  def withProcessingTime(): KeyedWatermark = withClock(KeyClock.ProcessingTime.name)

  /**
   * A key with no rows for `timeout` on the idle clock is idle: all its windows are emitted and
   * its state dropped, or with `advance` its watermark advances with the idle clock from then
   * on, keeping the lag it had. The idle clock is the stream's arrival clock (needs
   * [[withArrivalTime]]) unless [[withIdleClock]] names the wall clock (docs/semantics.md, "Idle keys").
   */
  def withIdleTimeout(timeout: String, advance: Boolean = false): KeyedWatermark =
    copy(spec.copy(idleTimeout = Some(DurationOption.positive("idle_timeout", timeout)), advanceWhenIdle = advance))

  /**
   * Each row's arrival (ingestion) time, a TIMESTAMP column (Kafka's `timestamp`, the file
   * source's `_metadata.file_modification_time`, ...): the arrival clock of the idle options.
   */
  def withArrivalTime(arrivalTime: Column): KeyedWatermark = copy(spec.copy(arrivalTime = Some(arrivalTime)))

  /** The idle options' clock: "arrival" (the default) or "processing_time" (the wall clock; not outage-safe). */
  def withIdleClock(clock: String): KeyedWatermark = copy(spec.copy(idleClock = Some(IdleClock.parse(clock))))

  /**
   * A key's watermark is held at most `maxSkew` behind Spark's global watermark (default: one
   * hour, see docs/semantics.md); "unbounded" turns the bound off.
   */
  def withMaxSkew(maxSkew: String): KeyedWatermark = copy(spec.copy(maxSkew = SkewBound.parse(maxSkew)))

  /**
   * Rows whose event time is more than `maxAhead` ahead of the micro-batch's processing time
   * are invalid (default: one day; "unbounded" turns the guard off).
   */
  def withMaxAhead(maxAhead: String): KeyedWatermark =
    copy(spec.copy(maxAheadMicros = WatermarkSpec.maxAhead(maxAhead)))

  /**
   * The per-batch metric `stuck_keys` counts the keys handled in a micro-batch whose watermark
   * trails Spark's global watermark by more than `stuckAfter` (default 10 minutes).
   */
  def withStuckAfter(stuckAfter: String): KeyedWatermark =
    copy(spec.copy(stuckAfterMicros = DurationOption.nonNegative("stuck_after", stuckAfter).micros))

  /**
   * What the per-batch metrics hold: "keys" (default) the output counts plus the per-key
   * metrics (keys in the batch, new and released keys, watermark lag quantiles, stuck keys);
   * "counts" only the counts (windows emitted, late rows, held watermarks), which costs less
   * per micro-batch.
   */
  def withMetrics(metrics: String): KeyedWatermark =
    copy(spec.copy(keyMetrics = WatermarkSpec.keyMetrics(metrics), metricsSet = true))

  /**
   * Plans the stage for Spark's real-time mode (`trigger(realTime=...)`): each row checked
   * against its key's watermark as it stands before that row, the windows it passes written at
   * once (docs/semantics.md, "Real-time mode"). The per-key metrics are off unless set (which
   * it refuses); options that need another clock are refused.
   */
  def withRealTime(): KeyedWatermark =
    copy(spec.copy(realTime = true, keyMetrics = spec.metricsSet && spec.keyMetrics))

  /**
   * The stage's name, for a query with several keyed stages: its observed metrics are
   * `keyed_watermarks_input.<name>` and `keyed_watermarks_output.<name>` (default: the plain
   * names for the query's first keyed stage, the key columns joined with "_" for a later one).
   */
  def withName(name: String): KeyedWatermark = copy(spec.copy(stageName = Some(name)))

  /**
   * Per-key deduplication: a row whose values of `columns` the key already had within its
   * horizon is dropped and counted (`duplicate_rows`), as Spark's
   * `dropDuplicatesWithinWatermark(columns)` does with the global watermark
   * (docs/semantics.md, "Deduplication").
   */
  def withDedup(columns: String*): KeyedWatermark = {
    if (columns.isEmpty) io.github.keyedwatermarks.spec.OptionError("dedup: expected a non-empty list of columns")
    copy(spec.copy(dedup = columns))
  }

  /**
   * Which watermark closes a key's windows (option `closing`, one choice: the last one set is
   * used): "keyed" (default, the key's own), "global" (Spark's global watermark for every key, as
   * `withWatermark(eventTime, lateness)`) or "fleet" (Spark's global watermark behind each key's
   * learnt skew; docs/semantics.md, "Fleet closing").
   */
  def withClosing(closing: String): KeyedWatermark = copy(spec.copy(closing = Closing.parse(closing)))

  /** Every key uses Spark's global watermark: `withClosing("global")`. */
  def withGlobalClosing(): KeyedWatermark = withClosing(Closing.Global.name)

  /** Every key follows Spark's global watermark behind its own learnt skew: `withClosing("fleet")`. */
  def withFleetClosing(): KeyedWatermark = withClosing(Closing.Fleet.name)

  /**
   * Min of inputs: the watermark is kept per (key, source); the key's watermark is the minimum
   * over its sources, defined once every `expected` source (or, if none given, every source
   * seen) has reported; a source silent for `idleTimeout` stops holding the key back.
   */
  def withSources(source: Column, expected: Seq[String] = Nil, idleTimeout: Option[String] = None): KeyedWatermark =
    copy(spec.copy(sources = Some(SourcesSpec(source, expected,
          idleTimeout.map(DurationOption.positive("source_idle_timeout", _))))))

  /**
   * Tumbling windows of `size` (a Spark duration string, e.g. "10 seconds"), or sliding windows
   * starting every `slide`, with the bounds of Spark's `window(ts, size[, slide])`.
   *
   * `allowedLateness` keeps a window in state that much longer after the key's watermark
   * passes its end: rows arriving meanwhile update it and it fires again, as a new `revision`
   * (0 for the first firing), like Flink's late firings.
   */
  def window(size: String, slide: Option[String] = None, allowedLateness: Option[String] = None): KeyedWindow = {
    val s = DurationOption("window", size)
    val allowed = allowedLateness.map(DurationOption("allowed_lateness", _))
    windows(slide.map(DurationOption("slide", _)).fold[WindowSpec](Tumbling(s, allowed))(Sliding(s, _, allowed)))
  }

  def window(size: String, slide: String): KeyedWindow = window(size, Some(slide))

  /**
   * Session windows with a fixed `gap`: a key's rows less than `gap` apart form one session,
   * [first event, last event + gap), with the bounds of Spark's `session_window(ts, gap)`,
   * emitted when its key's watermark passes its end. With `allowedLateness` a session stays
   * that much longer and rows that still merge into it make it fire again as the next
   * `revision` (see docs/semantics.md).
   */
  def session(gap: String, allowedLateness: Option[String] = None): KeyedWindow =
    windows(Sessions(FixedGap(DurationOption("gap", gap)), allowedLateness.map(DurationOption("allowed_lateness", _))))

  def session(gap: String, allowedLateness: String): KeyedWindow = session(gap, Option(allowedLateness))

  /**
   * Session windows with a per-row gap, as `session_window(ts, gapColumn)` allows: a column of
   * durations (a string such as "5 minutes" or a calendar interval); each row's session ends at
   * `ts + gap`, computed as Spark computes it. Rows whose session would not end after they
   * start (null, unparsable or non-positive gap) are invalid (Spark's session_window drops
   * them): counted as `invalid_gap_rows`, never aggregated.
   */
  def session(gap: Column): KeyedWindow = session(gap, None)

  def session(gap: Column, allowedLateness: Option[String]): KeyedWindow =
    windows(Sessions(ColumnGap(gap), allowedLateness.map(DurationOption("allowed_lateness", _))))

  def windows(windows: WindowSpec): KeyedWindow = new KeyedWindow(events, spec, windows)
}

/** Windows per key; `agg` builds the streaming result. */
final class KeyedWindow private[keyedwatermarks] (events: DataFrame, watermark: WatermarkSpec,
    val windows: WindowSpec, val emission: Emission = Emission.Default) {
  SpecChecks.windows(windows, events)
  emission.validate(windows)

  /**
   * When windows fire: "final" (the default: once, when the key's watermark passes the
   * window's end, plus revisions within allowed lateness) or "every_batch" (also an early pane
   * at the end of every micro-batch that changed the window); and what repeated panes hold:
   * "accumulating" (the whole window), "discarding" (the rows since the last pane) or
   * "retracting" (the whole window, after a row withdrawing the last pane). Adds `kw_pane` and
   * `kw_pane_index` (and `kw_retraction`) to the result: docs/semantics.md, "Panes and
   * accumulation".
   */
  def emit(when: String, accumulation: String = Emission.Accumulating.name): KeyedWindow =
    new KeyedWindow(events, watermark, windows, Emission.of(Some(when), Some(accumulation)))

  /**
   * Append-mode result with exactly the columns of
   * `events.groupBy(keys, window(eventTime, size)).agg(aggs)` (plus `revision` with allowed
   * lateness): one row per (key, window), emitted in the micro-batch in which the key's
   * watermark passes the window's end (and again per late firing with allowed lateness).
   */
  def agg(aggs: Column*): DataFrame = KeyedPlanner.plan(events,
    KeyedQuerySpec(watermark, windows,
      AggregationSpec(aggs), emission))

  /**
   * The result rows plus report rows: adds `kw_kind` ("window" or "late"), `kw_late_rows` and
   * `kw_watermark` (the key's watermark at the start of the batch). A "late" row per key and
   * batch counts the key's late rows, which were left out of the aggregates.
   *
   * With `keepLateRows`, every late row is also emitted as a "late_row" row carrying the
   * original row (`kw_late_row`, a struct of the input's columns) and `kw_reason`, so that one
   * query can write results and late rows to two sinks. Kept rows travel through the shuffle
   * with the partials, so this costs throughput.
   */
  def aggWithReport(keepLateRows: Boolean, aggs: Column*): DataFrame = KeyedPlanner.plan(events,
    KeyedQuerySpec(watermark, windows, AggregationSpec(aggs, withReport = true, keepLateRows = keepLateRows),
      emission))

  def aggWithReport(aggs: Column*): DataFrame = aggWithReport(keepLateRows = false, aggs: _*)
}
