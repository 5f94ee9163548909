package io.github.keyedwatermarks.planner

import org.apache.spark.sql.{Column, DataFrame, Encoders, functions => F}
import org.apache.spark.sql.catalyst.plans.logical.EventTimeWatermark
import org.apache.spark.sql.streaming.{OutputMode, TimeMode}
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{MetadataBuilder, StructType}

import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.catalyst.{CatalystAggregation, SparkInternals, TaskReadyEncoder}
import io.github.keyedwatermarks.partials.{PartialAggregation, PartialColumns, RowPartials}
import io.github.keyedwatermarks.emission.{KeyTallyRelay, WindowEmitter, OutputMetrics => OutputMetricColumns}
import io.github.keyedwatermarks.hooks.{AfterKeyedStageCheck, SparkHooks}
import io.github.keyedwatermarks.input.{
  DedupColumns, DurationColumn, InputPlan, InvalidRows, ProjectedInput, SessionGap
}
import io.github.keyedwatermarks.operator.{KeyedWindowProcessor, OperatorPlan}
import io.github.keyedwatermarks.spec._
import io.github.keyedwatermarks.watermark.{AdaptiveLateness, WatermarkPolicy}
import io.github.keyedwatermarks.window.{AlignedWindows, SessionWindows}

/**
 * Plans a [[KeyedQuerySpec]] over a streaming DataFrame:
 *  1. [[resolveInput]]: validates the spec against the input (before any query starts);
 *  2. [[reference]]: Spark's own `groupBy(keys, window).agg(aggs)`, which resolves and
 *     type-checks the aggregates and fixes the result's columns;
 *  3. [[project]]: only the columns the aggregates and the policy read, plus a reason code;
 *  4. [[prepare]]: one partial per (key, window) per input partition, before the shuffle;
 *  5. [[operator]]: `transformWithState` with the per-key watermark processor;
 *  6. [[observe]]: invalid rows added (when kept) and the per-batch output counts; then the
 *     window rows ([[WindowEmitter.windowsOnly]]) or the report stream ([[withoutKeyRows]]).
 */
private[keyedwatermarks] object KeyedPlanner {
  val OutputMetrics: String = Contract.OutputMetrics

  /**
   * The streaming result: the report stream (`agg_with_report`), or only the window rows with
   * the columns and nullability of `groupBy(keys, window).agg(aggs)` (`agg`).
   */
  def plan(events: DataFrame, spec: KeyedQuerySpec): DataFrame = AfterKeyedStageCheck.whilePlanning {
    val p = prepare(events, spec)
    val out = operator(p)
    val metered = observe(
      p.projected.invalidRows.fold(out)(invalid =>
        out.union(WindowEmitter.invalidRows(invalid, p.operatorPlan.emitter, p.input.keys))),
      KeyedStages.metricsName(OutputMetrics, p.stage), spec.watermark.keyMetrics, onePass = !spec.watermark.realTime)
    // The window rows straight from the observed rows (a filter and a projection; no "key" rows
    // pass the filter), not through the report stream's: every node of the plan is optimized
    // and planned again in every micro-batch.
    if (spec.aggregation.withReport) withoutKeyRows(metered) else p.operatorPlan.emitter.windowsOnly(metered)
  }

  /**
   * Everything before the operator: the validated input, the partials grouped by key (payload
   * bytes and key columns), and what the operator needs. `streaming = false` plans one
   * micro-batch of rows as a batch DataFrame (the in-memory operator tests).
   */
  final case class Prepared(
      input: InputPlan,
      projected: ProjectedInput,
      grouped: DataFrame,
      operatorPlan: OperatorPlan,
      timeMode: TimeMode,
      /** The stage's name in its metrics ("": the plain names; see [[KeyedStages.stageName]]). */
      stage: String = "")

  def prepare(events: DataFrame, spec: KeyedQuerySpec, streaming: Boolean = true): Prepared =
    AfterKeyedStageCheck.whilePlanning(prepareStage(events, spec, streaming))

  private def prepareStage(events: DataFrame, spec: KeyedQuerySpec, streaming: Boolean): Prepared = {
    val input = resolveInput(events, spec, streaming)
    SparkHooks.requireInstalled(events.sparkSession)
    val upstream = SparkInternals.analyzedPlan(events)
    val stage = KeyedStages.stageName(spec.watermark.stageName, input.keys, upstream)
    val policy = WatermarkPolicies.of(spec.watermark)
    val windows = Assigners.of(spec.windows)
    val ref = reference(input, spec)
    val projected = project(input, ref, spec)
    val aggregation = CatalystAggregation.fromAnalyzedAggregate(ref.analyzed, SparkInternals.output(projected.frame))
    val panes = PaneRules.of(spec.emission)
    val emitter = new WindowEmitter(ref.resultSchema, input.keys.map(ref.schema.fieldIndex).toArray,
      if (spec.aggregation.keepLateRows) Some(input.events.schema) else None,
      withRevision = spec.windows.allowedLateness.isDefined && !spec.emission.withPaneColumns, panes)
    // real_time: each row its own partials, no aggregation across rows (docs/semantics.md, "Real-time mode").
    val micro = PartialAggregation(
      ArrivalWatermark.track(projected.frame, policy), input.keys.size, windows,
      aggregation,
      spec.aggregation.keepLateRows,
      policy.proposal.lateness.exists(_.isInstanceOf[AdaptiveLateness]))
    val partials = if (spec.watermark.realTime) RowPartials(micro) else micro
    val operatorPlan = OperatorPlan(
      keySchema = projected.keySchema,
      payloadSchema = partials.payloadSchema,
      windows = windows,
      policy = policy,
      allowedLatenessMicros = spec.windows.allowedLateness.fold(0L)(_.micros),
      dedup = spec.watermark.dedup.nonEmpty,
      keepLateRows = spec.aggregation.keepLateRows,
      aggregation = aggregation,
      emitter = emitter,
      panes = panes,
      windowRows = PaneRules.windowRows(panes, windows, aggregation.bufferSchema, ref.resultSchema),
      keyNames = input.keys,
      keyMetrics = spec.watermark.keyMetrics,
      perRow = spec.watermark.realTime,
      tallyId = java.util.UUID.randomUUID().toString)
    val keys = projected.keySchema.indices.map(ProjectedInput.keyColumnName).map(F.col)
    val valid = InvalidRows.observe(partials.frame, PartialColumns.WindowStart, PartialColumns.Rows,
      withSource = spec.watermark.sources.isDefined, withGap = perRowGap(spec.windows),
      withLateness = spec.watermark.keyLateness match {
        case _: KeyLateness.ByColumn | _: KeyLateness.ByKey => true
        case KeyLateness.Fixed | _: KeyLateness.Adaptive => false
      },
      withFuture = spec.watermark.maxAheadMicros.isDefined,
      name = KeyedStages.metricsName(InputPlan.InputMetrics, stage), onePass = !spec.watermark.realTime)
    // A value is the payload bytes (plus the key columns, which Spark's value encoder must
    // cover), so the encoders copy one array per partial instead of converting every field to a
    // Row and back. (A key hash leading the grouping, to make the sort's prefix decide, cost
    // more in state store lookups out of key order than it saved: benchmarks/results/profile.md.)
    val tracked =
      if (!policy.usesGlobalWatermark) valid
      else GlobalWatermark.followOrTrack(valid, spec.watermark, upstream)
    val grouped = tracked.select(tracked.col(PartialColumns.Payload) +: keys: _*)
    Prepared(input, projected, grouped, operatorPlan, timeMode(policy), stage)
  }

  /**
   * Validates the whole spec against `events`. (With max_skew / closing='global', Spark's global
   * watermark is tracked on the partials, in [[prepare]]: see [[GlobalWatermark]].)
   */
  def resolveInput(events: DataFrame, spec: KeyedQuerySpec, streaming: Boolean = true): InputPlan = {
    val input = SpecChecks.watermark(spec.watermark, events, streaming)
    spec.watermark.validateQuery()
    SpecChecks.windows(spec.windows, events)
    if (spec.watermark.realTime) SpecChecks.realTime(spec)
    requireRocksDb(events)
    input
  }

  /** Spark's batch aggregation of the same query: its analyzed plan and its result schema. */
  final case class Reference(frame: DataFrame) {
    lazy val analyzed = SparkInternals.analyzedPlan(frame)
    def schema = frame.schema

    /**
     * The result's columns: the reference's, without the metadata that describes the
     * reference's own columns rather than the stage's output:
     *  - Spark's event-time watermark marker: with a `withWatermark` upstream, Spark's groupBy
     *    marks the window column as event time; the stage's output carries no watermark
     *    (docs/semantics.md, "Keyed stages in a pipeline"), and the marker would make Spark take
     *    it for one downstream;
     *  - the input Dataset's id and column position (classic Dataset.col tags its columns so
     *    that Spark can tell the sides of a self-join apart): on the output's new columns they
     *    would point at the input Dataset, which Spark's ambiguous-self-join check rejects in a
     *    plan with a join (see [[reference]]).
     */
    def resultSchema: StructType = StructType(schema.fields.map { f =>
      val stale = Reference.InputMetadata.filter(f.metadata.contains)
      if (stale.isEmpty) f
      else f.copy(metadata = stale.foldLeft(new MetadataBuilder().withMetadata(f.metadata))(_.remove(_)).build())
    })
  }

  object Reference {
    /** EventTimeWatermark.delayKey, and classic Dataset's DATASET_ID_KEY and COL_POS_KEY. */
    val InputMetadata: Seq[String] = Seq(EventTimeWatermark.delayKey, "__dataset_id", "__col_position")
  }

  def reference(input: InputPlan, spec: KeyedQuerySpec): Reference = {
    val aggs = spec.aggregation.aggregates
    // Spark resolves and type-checks the aggregates exactly as for a batch groupBy; a
    // non-aggregate expression fails here with Spark's own AnalysisException.
    // The window over the event time by name, not by `events.col`: Spark's window rewrite
    // (TimeWindowing) keeps the Dataset.col tag on the `window` column it creates, which Spark's
    // ambiguous-self-join check then rejects whenever the input has a join ("Column window#N are
    // ambiguous", a stream-static join before the stage).
    val eventTime = F.col(spec.watermark.eventTime)
    val ref = Reference(input.events.groupBy(input.keyColumns :+ windowColumn(eventTime, spec.windows): _*)
        .agg(aggs.head, aggs.tail: _*))
    OutputNames.check(ref.schema, input.keys.size, spec)
    ref
  }

  /** The window column of the reference aggregation (its name and type are the result's). */
  private def windowColumn(eventTime: Column, windows: WindowSpec): Column = windows match {
    case Tumbling(size, _) => F.window(eventTime, size.text)
    case Sliding(size, slide, _) => F.window(eventTime, size.text, slide.text)
    case Sessions(FixedGap(gap), _) => F.session_window(eventTime, gap.text)
    case Sessions(ColumnGap(gap), _) => F.session_window(eventTime, gap)
  }

  /** Per-row session end, when the gap is per row (a column, or days on the calendar). */
  private def rowSessionEnd(input: InputPlan, windows: WindowSpec): Option[Column] = windows match {
    case Sessions(g @ FixedGap(gap), _) if g.hasCalendarDays =>
      Some(SessionGap.rowEndMicros(input.events, input.eventTimeColumn, F.lit(gap.text)))
    case Sessions(ColumnGap(gap), _) => Some(SessionGap.rowEndMicros(input.events, input.eventTimeColumn, gap))
    case _: Tumbling | _: Sliding | Sessions(FixedGap(_), _) => None
  }

  private def perRowGap(windows: WindowSpec): Boolean = Assigners.of(windows) match {
    case s: SessionWindows => s.gapMicros.isEmpty
    case _: AlignedWindows => false
  }

  /** Per-row lateness in microseconds (null: the default), when the policy reads a column. */
  private def latenessColumn(input: InputPlan, keyLateness: KeyLateness): Option[Column] = keyLateness match {
    case KeyLateness.ByColumn(c) => Some(DurationColumn.micros(input.events, c, "key_lateness"))
    case KeyLateness.ByKey(mapping) =>
      val key = input.keyColumns.head.cast("string")
      Some(mapping.foldLeft(F.lit(null).cast("long")) { case (acc, (k, d)) =>
        F.when(key === k, F.lit(d.micros)).otherwise(acc)
      })
    case KeyLateness.Fixed | _: KeyLateness.Adaptive => None
  }

  def project(input: InputPlan, ref: Reference, spec: KeyedQuerySpec): ProjectedInput = {
    val w = spec.watermark
    val eventColumns = SparkInternals.output(input.events)
    val referenced = CatalystAggregation.referencedInputs(ref.analyzed)
    val aggregateInputs = eventColumns.filter(a => referenced.contains(a.exprId)).map(_.name)
    val sessionEnd = rowSessionEnd(input, spec.windows)
    val source = w.sources.map(_.column.cast("string"))
    val lateness = latenessColumn(input, w.keyLateness)
    val policyColumns =
      lateness.map(c => F.coalesce(c, F.lit(w.lateness.micros)).as(PartialColumns.Lateness)).toSeq ++
        source.map(_.as(PartialColumns.Source)).toSeq ++
        sessionEnd.map(_.as(PartialColumns.RowSessionEnd)).toSeq ++
        (if (w.dedup.isEmpty) Nil else Seq(DedupColumns.values(input, w.dedup).as(PartialColumns.Dedup))) ++
        (if (w.idleOnArrival) ArrivalWatermark.columns(w.arrivalTime.get) else Nil)
    ProjectedInput(input, aggregateInputs, spec.aggregation.keepLateRows, policyColumns, source, sessionEnd,
      lateness, w.maxAheadMicros)
  }

  /**
   * ProcessingTime mode makes Spark run a no-data batch after every batch (it cannot know when
   * a timer is due), so it is used only when a policy needs processing-time timers. EventTime
   * mode gives us Spark's global watermark (max_skew, closing='global'; or the arrival clock of
   * the idle options); it drops no rows here because no column of the partials carries
   * watermark metadata.
   */
  private def timeMode(policy: WatermarkPolicy): TimeMode =
    if (policy.usesProcessingTimers) TimeMode.ProcessingTime()
    else if (policy.usesGlobalWatermark || policy.usesArrivalClock) TimeMode.EventTime()
    else TimeMode.None()

  /**
   * `transformWithState` with the per-key watermark processor over the grouped partials; its
   * rows (UnsafeRow bytes, see [[WindowEmitter]]) read back as the emitter's output columns.
   */
  def operator(p: Prepared): DataFrame = {
    val keys = p.projected.keySchema.indices.map(ProjectedInput.keyColumnName).map(F.col)
    val plan = p.operatorPlan
    val out = p.grouped
      .groupBy(keys: _*)
      // The key's encoder ready for tasks: Spark's state API and timers set it up in every task.
      .as(TaskReadyEncoder.row(p.projected.keySchema), Encoders.row(p.grouped.schema))
      .transformWithState(new KeyedWindowProcessor(plan), p.timeMode, OutputMode.Append())(
        Encoders.row(WindowEmitter.OperatorOutputSchema))
      .toDF()
    // With the per-key metrics, each task's tally of its keys follows its rows (KeyTallyRelay).
    plan.emitter.columns(
      if (!plan.keyMetrics) out
      else SparkBridge.ofRows(out.sparkSession,
        KeyTallyRelay(plan.tallyId, plan.emitter, SparkInternals.analyzedPlan(out))))
  }

  /**
   * The per-batch output counts, as observed metrics (`query.lastProgress.observedMetrics`),
   * with the per-key metrics (keys in state, released, watermark lag) from the tallies of the
   * operator's tasks ("key" rows, one per task), which only feed the metrics: see
   * [[withoutKeyRows]].
   */
  def observe(
      all: DataFrame, name: String = OutputMetrics, keyMetrics: Boolean = true, onePass: Boolean = true): DataFrame = {
    val metrics = OutputMetricColumns.columns(all, WindowEmitter.KindColumn, WindowEmitter.LateRowsColumn,
      WindowEmitter.KeyMetricsColumn, keyMetrics, onePass)
    all.observe(name, metrics.head, metrics.tail: _*)
  }

  /** The report stream: the observed rows without the "key" rows and their tally column. */
  def withoutKeyRows(observed: DataFrame): DataFrame =
    observed.where(observed.col(WindowEmitter.KindColumn) =!= WindowEmitter.KeyKindValue)
      .drop(WindowEmitter.KeyMetricsColumn)

  val RocksDbProvider = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

  /** transformWithState keeps its state only in the RocksDB provider: say so before the query starts. */
  def requireRocksDb(events: DataFrame): Unit = {
    val key = "spark.sql.streaming.stateStore.providerClass"
    val provider = events.sparkSession.conf.getOption(key).getOrElse("")
    if (provider != RocksDbProvider) throw new IllegalArgumentException(
      s"keyed watermarks keep their state in the RocksDB state store: set $key=$RocksDbProvider " +
        s"(keyed_watermarks.configure(builder) does this); it is '$provider'")
  }
}
