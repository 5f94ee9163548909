package io.github.keyedwatermarks

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{Column, DataFrame, Encoders, functions => F}
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.streaming.{OutputMode, TimeMode}

import io.github.keyedwatermarks.compat.{CatalystAggregation, PartialAggregation, SparkInternals}
import io.github.keyedwatermarks.emission.WindowEmitter
import io.github.keyedwatermarks.input.{DurationColumn, InputPlan, InvalidRows, ProjectedInput, SessionGap}
import io.github.keyedwatermarks.operator.{KeyedWindowProcessor, OperatorPlan}
import io.github.keyedwatermarks.watermark._
import io.github.keyedwatermarks.window.{SessionWindows, SlidingWindows, TumblingWindows, WindowAssigner}

/**
 * Entry point for Scala and (through py4j-friendly overloads) Python.
 *
 * {{{
 * import io.github.keyedwatermarks.KeyedWatermarks
 * val perDevice = KeyedWatermarks(events, Seq("device"), "ts", "5 seconds")
 *   .window("10 seconds")
 *   .agg(count("*").as("n"), avg("temp").as("avg_temp"))
 * }}}
 */
object KeyedWatermarks {
  val OutputMetrics = "keyed_watermarks_output"

  def apply(
      events: DataFrame,
      keys: Seq[String],
      eventTime: String,
      lateness: String,
      idleTimeout: Option[String] = None): KeyedWatermark = {
    compat.SparkVersionCheck.requireBuiltForRunningSpark()
    val input = InputPlan.validate(events, keys, eventTime)
    val latenessMicros = nonNegative("lateness", lateness)
    val base = new KeyedWatermark(input, lateness, WatermarkPolicy(latenessMicros), None, None)
    idleTimeout.fold(base)(t => base.withIdleTimeout(t, advance = false))
  }

  private[keyedwatermarks] def nonNegative(option: String, duration: String): Long = {
    val micros = SparkInternals.durationMicros(option, duration)
    if (micros < 0) throw new IllegalArgumentException(s"$option: must not be negative, got '$duration'")
    micros
  }

  private[keyedwatermarks] def positiveMillis(option: String, duration: String): Long = {
    val micros = SparkInternals.durationMicros(option, duration)
    if (micros <= 0) throw new IllegalArgumentException(s"$option: must be positive, got '$duration'")
    math.max(1L, micros / 1000L)
  }

  // ---- py4j-friendly signatures (strings, java.util.List, null for "not set") ----

  def keyedWatermark(
      events: DataFrame,
      keys: java.util.List[String],
      eventTime: String,
      lateness: String,
      idleTimeout: String): KeyedWatermark =
    apply(events, keys.asScala.toSeq, eventTime, lateness, Option(idleTimeout))

  def window(watermark: KeyedWatermark, size: String, slide: String, allowedLateness: String): KeyedWindow =
    watermark.window(size, slide, allowedLateness)

  def session(watermark: KeyedWatermark, gap: String, allowedLateness: String): KeyedWindow =
    watermark.session(gap, allowedLateness)

  def session(watermark: KeyedWatermark, gap: Column, allowedLateness: String): KeyedWindow =
    watermark.session(gap, allowedLateness)

  def agg(window: KeyedWindow, aggs: java.util.List[Column], withReport: Boolean, keepLateRows: Boolean): DataFrame =
    if (withReport) window.aggWithReport(keepLateRows, aggs.asScala.toSeq: _*) else window.agg(aggs.asScala.toSeq: _*)

  /** Per-key lateness from a mapping of (string) key value to duration; other keys use the default. */
  def latenessMapping(watermark: KeyedWatermark, mapping: java.util.Map[String, String]): KeyedWatermark =
    watermark.withLatenessMapping(mapping.asScala.toMap)

  def sources(watermark: KeyedWatermark, source: Column, expected: java.util.List[String], idleTimeout: String): KeyedWatermark =
    watermark.withSources(source, Option(expected).map(_.asScala.toSeq).getOrElse(Nil), Option(idleTimeout))

  val RocksDbProvider = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

  /** transformWithState keeps its state only in the RocksDB provider: say so before the query starts. */
  private[keyedwatermarks] def requireRocksDb(events: DataFrame): Unit = {
    val key = "spark.sql.streaming.stateStore.providerClass"
    val provider = events.sparkSession.conf.getOption(key).getOrElse("")
    if (provider != RocksDbProvider) throw new IllegalArgumentException(
      s"keyed watermarks keep their state in the RocksDB state store: set $key=$RocksDbProvider " +
        s"(keyed_watermarks.configure(builder) does this); it is '$provider'")
  }

}

/**
 * Per-key watermark settings over a stream; choose the policy (optional, see
 * docs/semantics.md "Watermark policies"), then the windows. Each `with...` returns a copy.
 */
final class KeyedWatermark private[keyedwatermarks] (
    private[keyedwatermarks] val input: InputPlan,
    private[keyedwatermarks] val latenessText: String,
    val policy: WatermarkPolicy,
    /** Per-row lateness in microseconds (null: the default), when set. */
    private[keyedwatermarks] val latenessColumn: Option[Column],
    private[keyedwatermarks] val sourceColumn: Option[Column]) {

  def latenessMicros: Long = policy.latenessMicros
  def idleTimeoutMillis: Option[Long] = policy.idleTimeoutMillis

  private def copy(
      policy: WatermarkPolicy = policy,
      latenessColumn: Option[Column] = latenessColumn,
      sourceColumn: Option[Column] = sourceColumn): KeyedWatermark =
    new KeyedWatermark(input, latenessText, policy.validate(), latenessColumn, sourceColumn)

  /**
   * Per-key lateness from a column: a duration per row (a Spark duration string such as
   * "5 minutes", a DAY TO SECOND interval or a CALENDAR interval without months); null uses
   * the default lateness. A key's lateness is the largest value among its rows of its latest
   * micro-batch.
   */
  def withLatenessColumn(lateness: Column): KeyedWatermark = {
    if (lateness == null) throw new IllegalArgumentException("lateness: column is null")
    val micros = DurationColumn.micros(input.events, lateness, "lateness")
    copy(policy = policy.copy(lateness = ColumnLateness), latenessColumn = Some(micros))
  }

  /** Per-key lateness from a mapping of key value (as a string) to a duration string. */
  def withLatenessMapping(mapping: Map[String, String]): KeyedWatermark = {
    if (input.keys.size != 1) throw new IllegalArgumentException(
      s"lateness: a mapping needs a single key column, got ${input.keys.mkString(", ")}; use a lateness column")
    val micros = mapping.map { case (k, d) => k -> KeyedWatermarks.nonNegative(s"lateness['$k']", d) }
    val key = input.keyColumns.head.cast("string")
    val column = micros.foldLeft(F.lit(null).cast("long")) { case (acc, (k, m)) => F.when(key === k, F.lit(m)).otherwise(acc) }
    copy(policy = policy.copy(lateness = ColumnLateness), latenessColumn = Some(column))
  }

  /**
   * Adaptive lateness: per key, the `quantile` of how far its rows trail the key's max event
   * time, from a bounded sketch (Spark's QuantileSummaries, `relativeError`), within [min, max].
   */
  def withAdaptiveLateness(quantile: Double, min: String, max: String, relativeError: Double): KeyedWatermark = {
    if (!(quantile > 0 && quantile <= 1)) throw new IllegalArgumentException(s"quantile: must be in (0, 1], got $quantile")
    if (!(relativeError > 0 && relativeError < 1)) throw new IllegalArgumentException(
      s"relative_error: must be in (0, 1), got $relativeError")
    val lo = KeyedWatermarks.nonNegative("min_lateness", min)
    val hi = KeyedWatermarks.nonNegative("max_lateness", max)
    if (lo > hi) throw new IllegalArgumentException(s"min_lateness '$min' is above max_lateness '$max'")
    copy(policy = policy.copy(lateness = AdaptiveLateness(quantile, lo, hi, relativeError)), latenessColumn = None)
  }

  /** `wm(k) = processing time - lateness` (the batch's processing time). */
  def withProcessingTime(): KeyedWatermark = copy(policy = policy.copy(processingTime = true))

  /**
   * A key with no rows for `timeout` (processing time) is idle: all its windows are emitted and
   * its state dropped, or with `advance` its watermark advances with the wall clock from then
   * on, keeping the lag it had.
   */
  def withIdleTimeout(timeout: String, advance: Boolean): KeyedWatermark =
    copy(policy = policy.copy(idleTimeoutMillis = Some(KeyedWatermarks.positiveMillis("idle_timeout", timeout)),
      advanceWhenIdle = advance))

  /** A key's watermark is held at most `maxSkew` behind Spark's global watermark. */
  def withMaxSkew(maxSkew: String): KeyedWatermark =
    copy(policy = policy.copy(maxSkewMicros = Some(KeyedWatermarks.nonNegative("max_skew", maxSkew))))

  /** Every key uses Spark's global watermark (`withWatermark(eventTime, lateness)`). */
  def withGlobalClosing(): KeyedWatermark = copy(policy = policy.copy(globalClosing = true))

  /**
   * Min of inputs: the watermark is kept per (key, source); the key's watermark is the minimum
   * over its sources, defined once every `expected` source (or, if none given, every source
   * seen) has reported; a source silent for `idleTimeout` stops holding the key back.
   */
  def withSources(source: Column, expected: Seq[String], idleTimeout: Option[String]): KeyedWatermark = {
    if (source == null) throw new IllegalArgumentException("source: column is null")
    input.events.select(source) // resolves now: an unknown column fails before the query starts
    copy(policy = policy.copy(sources = Some(SourcePolicy(expected.distinct,
      idleTimeout.map(KeyedWatermarks.positiveMillis("source_idle_timeout", _))))), sourceColumn = Some(source))
  }

  /** Tumbling windows of the given size (a Spark duration string, e.g. "10 seconds"). */
  def window(windowDuration: String): KeyedWindow = window(windowDuration, null, null)

  def window(windowDuration: String, slideDuration: String): KeyedWindow = window(windowDuration, slideDuration, null)

  /**
   * Session windows with a fixed `gap` (a Spark duration string): a key's rows less than
   * `gap` apart form one session, [first event, last event + gap), with the bounds of Spark's
   * `session_window(ts, gap)`. A session is emitted when its key's watermark passes its end.
   */
  def session(gap: String): KeyedWindow = session(gap, null: String)

  /**
   * Sessions with `allowedLateness` (null: none): a session fires when its key's watermark
   * passes its end and stays that much longer; rows that still merge into it make it fire again
   * as the next `revision` (see docs/semantics.md).
   */
  def session(gap: String, allowedLateness: String): KeyedWindow = {
    val gapMicros = SparkInternals.durationMicros("gap", gap)
    if (gapMicros <= 0) throw new IllegalArgumentException(s"gap: must be positive, got '$gap'")
    // session_window adds days as calendar days in the session time zone (23 or 25 hours across
    // a daylight-saving change): such a gap is computed per row, as Spark does.
    if (SparkInternals.durationDays(gap) != 0) perRowGap(F.session_window(input.eventTimeColumn, gap), F.lit(gap),
      allowedLateness)
    else new KeyedWindow(this, F.session_window(input.eventTimeColumn, gap), SessionWindows(gapMicros),
      allowed(allowedLateness), None)
  }

  /**
   * Session windows with a per-row gap, as `session_window(ts, gapColumn)` allows: a column of
   * durations (a string such as "5 minutes" or a calendar interval); each row's session ends at
   * `ts + gap`, computed as Spark computes it. Rows whose session would not end after they
   * start (null, unparsable or non-positive gap) are invalid (Spark's session_window drops
   * them): counted as `invalid_gap_rows`, never aggregated.
   */
  def session(gap: Column): KeyedWindow = session(gap, null)

  def session(gap: Column, allowedLateness: String): KeyedWindow = {
    if (gap == null) throw new IllegalArgumentException("gap: column is null")
    perRowGap(F.session_window(input.eventTimeColumn, gap), gap, allowedLateness)
  }

  private def perRowGap(windowColumn: Column, gap: Column, allowedLateness: String): KeyedWindow = {
    val rowEnd = SessionGap.rowEndMicros(input.events, input.eventTimeColumn, gap)
    new KeyedWindow(this, windowColumn, SessionWindows(0L, dynamicGap = true), allowed(allowedLateness), Some(rowEnd))
  }

  private def allowed(allowedLateness: String): Option[Long] = Option(allowedLateness).map { a =>
    val micros = SparkInternals.durationMicros("allowed_lateness", a)
    if (micros < 0) throw new IllegalArgumentException(s"allowed_lateness: must not be negative, got '$a'")
    micros
  }

  /**
   * Sliding windows of `windowDuration` starting every `slideDuration` (null: tumbling), with
   * the bounds of Spark's `window(ts, windowDuration, slideDuration)`.
   *
   * `allowedLateness` (null: none) keeps a window in state that much longer after the key's
   * watermark passes its end: rows arriving meanwhile update it and it fires again, as a new
   * `revision` (0 for the first firing), like Flink's late firings.
   */
  def window(windowDuration: String, slideDuration: String, allowedLateness: String): KeyedWindow = {
    val size = SparkInternals.durationMicros("window", windowDuration)
    if (size <= 0) throw new IllegalArgumentException(s"window: size must be positive, got '$windowDuration'")
    val allowedMicros = allowed(allowedLateness)
    Option(slideDuration) match {
      case None =>
        new KeyedWindow(this, F.window(input.eventTimeColumn, windowDuration), TumblingWindows(size), allowedMicros, None)
      case Some(slide) =>
        val slideMicros = SparkInternals.durationMicros("slide", slide)
        if (slideMicros <= 0 || slideMicros > size) throw new IllegalArgumentException(
          s"slide: must be positive and at most the window size '$windowDuration', got '$slide'")
        new KeyedWindow(this, F.window(input.eventTimeColumn, windowDuration, slide),
          if (slideMicros == size) TumblingWindows(size) else SlidingWindows(size, slideMicros), allowedMicros, None)
    }
  }
}

/** Windows per key; `agg` builds the streaming result. */
final class KeyedWindow private[keyedwatermarks] (
    watermark: KeyedWatermark,
    windowColumn: Column,
    assigner: WindowAssigner,
    allowedLatenessMicros: Option[Long],
    /** Sessions with a per-row gap: each row's session end in microseconds. */
    rowSessionEnd: Option[Column]) {

  /**
   * Append-mode result with exactly the columns of
   * `events.groupBy(keys, window(eventTime, size)).agg(aggs)` (plus `revision` with allowed
   * lateness): one row per (key, window), emitted in the micro-batch in which the key's
   * watermark passes the window's end (and again per late firing with allowed lateness).
   */
  def agg(aggs: Column*): DataFrame = {
    val (all, emitter) = build(keepLateRows = false, aggs)
    emitter.windowsOnly(all)
  }

  def aggWithReport(aggs: Column*): DataFrame = aggWithReport(keepLateRows = false, aggs: _*)

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
  def aggWithReport(keepLateRows: Boolean, aggs: Column*): DataFrame = build(keepLateRows, aggs)._1

  private def build(keepLateRows: Boolean, aggs: Seq[Column]): (DataFrame, WindowEmitter) = {
    if (aggs.isEmpty) throw new IllegalArgumentException("agg: at least one aggregate column is required")
    val policy = watermark.policy
    // With max_skew / closing='global', Spark tracks its global watermark on the input; our
    // partials carry no watermark column, so Spark drops nothing on its behalf.
    val input =
      if (!policy.usesGlobalWatermark) watermark.input
      else InputPlan.validate(watermark.input.events.withWatermark(watermark.input.eventTime, watermark.latenessText),
        watermark.input.keys, watermark.input.eventTime)
    KeyedWatermarks.requireRocksDb(input.events)
    // Spark resolves and type-checks the aggregates exactly as for a batch groupBy; a
    // non-aggregate expression fails here with Spark's own AnalysisException.
    val reference = input.events
      .groupBy(input.keyColumns :+ windowColumn: _*)
      .agg(aggs.head, aggs.tail: _*)
    val analyzed = SparkInternals.analyzedPlan(reference)
    val eventColumns = SparkInternals.output(input.events)
    val referenced = analyzed.flatMap(_.expressions).flatMap(_.collect { case ae: AggregateExpression => ae })
      .flatMap(_.references).map(_.exprId).toSet
    val aggregateInputs = eventColumns.filter(a => referenced.contains(a.exprId)).map(_.name)
    val policyColumns =
      watermark.latenessColumn.map(c => F.coalesce(c, F.lit(policy.latenessMicros))
        .as(PartialAggregation.Lateness)).toSeq ++
      watermark.sourceColumn.map(_.cast("string").as(PartialAggregation.Source)).toSeq ++
      rowSessionEnd.map(_.as(PartialAggregation.RowSessionEnd)).toSeq
    val projected = ProjectedInput(input, aggregateInputs, keepLateRows, policyColumns,
      watermark.sourceColumn.map(_.cast("string")), rowSessionEnd)
    val aggregation = CatalystAggregation.fromAnalyzedAggregate(analyzed, SparkInternals.output(projected.frame))
    val resultSchema = reference.schema
    val emitter = new WindowEmitter(resultSchema, input.keys.map(resultSchema.fieldIndex).toArray,
      if (keepLateRows) Some(input.events.schema) else None, withRevision = allowedLatenessMicros.isDefined)
    val partials = PartialAggregation(projected.frame, input.keys.size, assigner, aggregation, keepLateRows,
      keepEventTimes = policy.lateness.isInstanceOf[AdaptiveLateness])
    val plan = OperatorPlan(
      keySchema = projected.keySchema,
      payloadSchema = partials.payloadSchema,
      windows = assigner,
      policy = policy,
      allowedLatenessMicros = allowedLatenessMicros.getOrElse(0L),
      keepLateRows = keepLateRows,
      aggregation = aggregation,
      emitter = emitter)
    // ProcessingTime mode makes Spark run a no-data batch after every batch (it cannot know
    // when a timer is due), so it is used only when a policy needs processing-time timers.
    // EventTime mode gives us Spark's global watermark (max_skew, closing='global'); it drops
    // no rows here because no column of the partials carries watermark metadata.
    val timeMode =
      if (policy.usesProcessingTimers) TimeMode.ProcessingTime()
      else if (policy.usesGlobalWatermark) TimeMode.EventTime()
      else TimeMode.None()
    val keys = input.keys.indices.map(ProjectedInput.keyColumnName).map(F.col)
    val valid = InvalidRows.observe(partials.frame, PartialAggregation.WindowStart, PartialAggregation.Rows,
      withSource = watermark.sourceColumn.isDefined, withGap = rowSessionEnd.isDefined)
    // A value is the payload bytes (plus the key columns, which Spark's value encoder must
    // cover), so the encoders copy one array per partial instead of converting every field to a
    // Row and back. (A key hash leading the grouping, to make the sort's prefix decide, cost
    // more in state store lookups out of key order than it saved: benchmarks/results/profile.md.)
    val grouped = valid.select(valid.col(PartialAggregation.Payload) +: keys: _*)
    val out = grouped
      .groupBy(keys: _*)
      .as(Encoders.row(projected.keySchema), Encoders.row(grouped.schema))
      .transformWithState(new KeyedWindowProcessor(plan), timeMode, OutputMode.Append())(
        Encoders.row(emitter.outputSchema))
      .toDF()
    val all = projected.invalidRows.fold(out)(invalid => out.union(WindowEmitter.invalidRows(invalid, emitter,
      input.keys.map(resultSchema(_).name))))
    (all.observe(KeyedWatermarks.OutputMetrics,
      F.count(F.when(all.col(WindowEmitter.KindColumn) === "window", 1)).as("windows_emitted"),
      F.coalesce(F.sum(all.col(WindowEmitter.LateRowsColumn)), F.lit(0L)).as("late_rows"),
      F.count(F.when(all.col(WindowEmitter.KindColumn) === "watermark", 1)).as("keys_with_held_watermark")), emitter)
  }
}
