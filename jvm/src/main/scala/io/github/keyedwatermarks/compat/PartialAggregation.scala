package io.github.keyedwatermarks.compat

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, LogicalPlan, UnaryNode}
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.types.{ArrayType, BinaryType, DataType, LongType, StringType, StructType}

import io.github.keyedwatermarks.KeyedWatermarksExtensions
import io.github.keyedwatermarks.input.{InvalidRows, ProjectedInput}
import io.github.keyedwatermarks.window.WindowAssigner

/**
 * Pre-aggregation before the shuffle, as Spark's own aggregation does: within each input
 * partition of a micro-batch, rows are folded into one partial per (key, window). Lateness is
 * decided per (key, window) against the watermark at the start of the batch, so a partial is
 * wholly on time or wholly late; it carries its row count (for late accounting) and its max
 * event time (for the watermark). Only partials are shuffled, sorted and handed to the
 * stateful operator.
 *
 * Output: `kw_payload`, `kw_window_start`, `kw_rows`, `kw_max_event_time`, then the key columns. The payload is the
 * partial as UnsafeRow bytes (compat.UnsafeRowBytes; the operator reads it with
 * [[Partials.payloadSchema]]): stored buffer fields b0..bn first (so a payload row is directly
 * the right-hand side of CatalystAggregation.merge), then window start, row count, max event
 * time, then the optional watermark-policy columns (`kw_lateness_us`: the partial's max
 * per-row lateness; `kw_session_end`; `kw_event_times`: every row's event time, for adaptive
 * lateness; `kw_source`: the source, part of the grouping for min of inputs), then the kept
 * rows. `kw_rows` counts the rows whose *last* window is this one, so that with sliding
 * windows a row counts as late only when all its windows are closed. Window start, row count
 * and max event time are also columns of their own: for the input metrics before the shuffle,
 * and for Spark's global watermark (planner.GlobalWatermark), which then follows the partials
 * instead of every input row.
 *
 * When every payload field is fixed-width, the partial aggregation is planned as Spark's own
 * HashAggregateExec (see [[HashAggregatePartials]]); otherwise a partition's partials are held
 * by [[OnHeapPartials]] in [[KeyedPartialAggregateExec]].
 *
 * Invalid input rows (a non-zero `kw_invalid_code`) are skipped and counted: per partition and
 * reason, sentinel partials (window start `InvalidRows.sentinelStart(reason)`, the count in
 * `kw_rows`) that `InvalidRows.observe` counts and then drops.
 */
private[keyedwatermarks] object PartialAggregation {
  val Payload = "kw_payload"
  val WindowStart = "kw_window_start"
  val Rows = "kw_rows"
  val MaxEventTime = "kw_max_event_time"
  val KeptRows = "kw_kept_rows"
  val EventTimes = "kw_event_times"
  /** Optional input columns the partials carry (see input.ProjectedInput). */
  val Lateness = "kw_lateness_us"
  val Source = "kw_source"
  /** A row's own session end, t + gap, in microseconds (input; per-row gaps), and a session partial's end (output). */
  val RowSessionEnd = "kw_row_session_end_us"
  val SessionEnd = "kw_session_end"

  /**
   * @param input     rows with the key columns first, then the event time (micros), then the
   *                  aggregates' inputs, the policy's columns (found by name), the invalid-row
   *                  reason code `kw_invalid_code` and, with `keepRows`, the original row
   * @param keyCount  number of key columns
   * @param keepRows  the last input column is the original row (a struct): keep each row in
   *                  the partial that counts it, as the payload's last field `kw_kept_rows`,
   *                  so that the operator can emit it if it turns out late
   */
  def apply(
      input: DataFrame,
      keyCount: Int,
      windows: WindowAssigner,
      aggregation: CatalystAggregation,
      keepRows: Boolean,
      keepEventTimes: Boolean = false): Partials = {
    val session = input.sparkSession
    install(session)
    val child = SparkInternals.analyzedPlan(input)
    val inputs = child.output
    val buffers = aggregation.bufferSchema.map(f => AttributeReference(f.name, f.dataType, nullable = true)())
    val meta = Seq(WindowStart, Rows, MaxEventTime).map(n => AttributeReference(n, LongType, nullable = false)())
    val kept = if (keepRows) Some(inputs.last) else None
    val keptOut = kept.map(a => AttributeReference(KeptRows, ArrayType(a.dataType, containsNull = false))()).toSeq
    val lateness = inputs.find(_.name == Lateness)
    val source = inputs.find(_.name == Source)
    val gap = inputs.find(_.name == RowSessionEnd)
    val policyOut = lateness.map(_ => AttributeReference(Lateness, LongType, nullable = false)()).toSeq ++
      gap.map(_ => AttributeReference(SessionEnd, LongType, nullable = false)()).toSeq ++
      (if (keepEventTimes)
         Seq(AttributeReference(EventTimes, ArrayType(LongType, containsNull = false), nullable = false)())
       else Nil) ++ source.toSeq
    val payload = DataTypeUtils.fromAttributes(buffers ++ meta ++ policyOut ++ keptOut)
    val output = Seq(AttributeReference(Payload, BinaryType, nullable = false)()) ++
      Seq(WindowStart, Rows, MaxEventTime).map(n => AttributeReference(n, LongType, nullable = false)()) ++
      inputs.take(keyCount)
    val node = KeyedPartialAggregate(
      inputs.take(keyCount), inputs(keyCount), kept, PolicyColumns(lateness, keepEventTimes, source, gap),
      windows, aggregation, inputs, payload, output, new TwoLevelMapChoice, child)
    Partials(SparkBridge.ofRows(session, node), payload)
  }

  /** The strategy, unless the session has it from `spark.sql.extensions` (KeyedWatermarksExtensions). */
  private def install(session: SparkSession): Unit = synchronized {
    val experimental = session.experimental
    val extensions = session.conf.getOption("spark.sql.extensions").getOrElse("")
    if (!extensions.split(",").map(_.trim).contains(KeyedWatermarksExtensions.ClassName) &&
      !experimental.extraStrategies.contains(KeyedPartialAggregateStrategy)) {
      experimental.extraStrategies = experimental.extraStrategies :+ KeyedPartialAggregateStrategy
    }
  }
}

/** The partials (see [[PartialAggregation]]) and the schema of their payload. */
private[keyedwatermarks] final case class Partials(frame: DataFrame, payloadSchema: StructType)

/** The watermark-policy inputs a partial carries: lateness column, event times, source. */
private[keyedwatermarks] final case class PolicyColumns(
    lateness: Option[Attribute], eventTimes: Boolean, source: Option[Attribute], gap: Option[Attribute])

/** Logical node; `inputs` lists every column read so column pruning keeps them. */
private[keyedwatermarks] case class KeyedPartialAggregate(
    keys: Seq[Attribute],
    eventTime: Attribute,
    keptRow: Option[Attribute],
    policy: PolicyColumns,
    windows: WindowAssigner,
    aggregation: CatalystAggregation,
    inputs: Seq[Attribute],
    payload: StructType,
    output: Seq[Attribute],
    /** Spark's two-level hash map or not, from the micro-batches before (HashAggregatePartials). */
    twoLevelMap: TwoLevelMapChoice,
    child: LogicalPlan)
    extends UnaryNode {
  override protected def withNewChildInternal(newChild: LogicalPlan): KeyedPartialAggregate = copy(child = newChild)
  override def producedAttributes: AttributeSet = AttributeSet(output.filterNot(keys.contains))

  /**
   * Whether every payload field is fixed-width (the common case: tumbling or sliding windows
   * or sessions, numeric count/sum/avg/min/max, no kept rows, event times or sources): then
   * the partials are Spark's own HashAggregateExec's (see [[HashAggregatePartials]]). Spark's
   * own test for HashAggregateExec decides (mutable fixed-width buffers, binary-stable keys),
   * for at most [[HashAggregatePartials.MaxWindowsPerRow]] windows per row.
   */
  def sparkHashAggregate: Boolean = keptRow.isEmpty && !policy.eventTimes && policy.source.isEmpty &&
    Aggregate.supportsHashAggregate(DataTypeUtils.toAttributes(payload), keys) && HashAggregatePartials.supports(
      windows)
}

private[keyedwatermarks] object KeyedPartialAggregateStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case p: KeyedPartialAggregate if p.sparkHashAggregate => HashAggregatePartials.plan(p, planLater(p.child)) :: Nil
    case p: KeyedPartialAggregate =>
      KeyedPartialAggregateExec(p.keys, p.eventTime, p.keptRow, p.policy, p.windows, p.aggregation, p.inputs,
        p.payload, p.output, planLater(p.child)) :: Nil
    case _ => Nil
  }
}

/**
 * What both physical forms of the partial aggregation show ([[KeyedPartialAggregateExec]],
 * [[PartialPayloadExec]]): the keys, the path taken and the number of partials.
 */
private[keyedwatermarks] trait KeyedPartialNode extends UnaryExecNode {
  def keys: Seq[Attribute]

  /** The partial path: "on-heap" or "hash-aggregate". */
  protected def path: String

  override def producedAttributes: AttributeSet = AttributeSet(output.filterNot(keys.contains))

  override lazy val metrics: Map[String, SQLMetric] = Map(
    "numPartials" -> SQLMetrics.createMetric(sparkContext, "number of partials"))

  // Shown in explain() and the SQL UI; tests check which path a query takes.
  override def simpleString(maxFields: Int): String =
    s"KeyedPartialAggregate keys=${keys.mkString("[", ", ", "]")} partials=$path"
}

private[keyedwatermarks] case class KeyedPartialAggregateExec(
    keys: Seq[Attribute],
    eventTime: Attribute,
    keptRow: Option[Attribute],
    policy: PolicyColumns,
    windows: WindowAssigner,
    aggregation: CatalystAggregation,
    inputs: Seq[Attribute],
    payload: StructType,
    output: Seq[Attribute],
    child: SparkPlan)
    extends KeyedPartialNode {

  override protected def withNewChildInternal(newChild: SparkPlan): KeyedPartialAggregateExec = copy(child = newChild)
  override protected def path: String = "on-heap"

  override protected def doExecute(): RDD[InternalRow] = {
    val agg = aggregation
    val assigner = windows
    val childOutput = child.output
    val in = inputs
    val keyAttrs = keys
    val ts = eventTime
    val outAttrs = output
    val payloadSchema = payload
    val kept = keptRow
    val policyCols = policy
    val numPartials = longMetric("numPartials")
    child.execute().mapPartitions { rows =>
      val reorder: InternalRow => InternalRow =
        if (childOutput.map(_.exprId) == in.map(_.exprId)) identity else UnsafeProjection.create(in, childOutput)
      def ordinal(a: Option[Attribute]): Int = a.map(x => in.indexWhere(_.exprId == x.exprId)).getOrElse(-1)
      val columns = PartialInputs(
        keyCount = keyAttrs.size,
        eventTime = ordinal(Some(ts)),
        lateness = ordinal(policyCols.lateness),
        sessionEnd = ordinal(policyCols.gap),
        eventTimes = policyCols.eventTimes,
        kept = ordinal(kept),
        keptWidth = kept.map(_.dataType.asInstanceOf[StructType].length).getOrElse(0),
        stringKey =
          if (keyAttrs.size == 1 && keyAttrs.head.dataType == StringType && policyCols.source.isEmpty) {
            ordinal(keyAttrs.headOption)
          } else -1,
        // (keys..., window start[, source]): the source (min of inputs) is part of the grouping,
        // because the operator needs each source's max.
        groupKey =
          (keyAttrs.map(k => BindReferences.bindReference[Expression](k, in)) :+
            BoundReference(in.size, LongType, nullable = false)) ++
            policyCols.source.map(s => BindReferences.bindReference[Expression](s, in)).toSeq)
      val invalid = new InvalidRowCounter(in.indexWhere(_.name == ProjectedInput.InvalidReasonCode))
      val out = new PartialOutput(payloadSchema, outAttrs, keyAttrs, agg, policyCols, kept.map(_.dataType))
      val partials = new OnHeapPartials(agg, assigner, columns, invalid, out)
      (partials.aggregate(rows.map(reorder)) ++ invalid.sentinels(agg, keyAttrs, policyCols, in, out))
        .map { row => numPartials += 1; row }
    }
  }
}

/**
 * Where a partition's input columns are (ordinals into the input row; -1 when absent), and
 * the grouping key of a partial, bound to `JoinedRow(input row, window start)`.
 */
private[compat] final case class PartialInputs(
    keyCount: Int,
    eventTime: Int,
    lateness: Int,
    sessionEnd: Int,
    eventTimes: Boolean,
    kept: Int,
    keptWidth: Int,
    stringKey: Int,
    groupKey: Seq[Expression]) {

  /** A projection to the grouping key; its result is reused by the next call. */
  def groupKeyProjection(): GroupKeyProjection = new GroupKeyProjection(groupKey)
}

/** (input row, window start) -> grouping key; a class, not a Function2, so the Long is not boxed per row. */
private[compat] final class GroupKeyProjection(groupKey: Seq[Expression]) {
  private val project = UnsafeProjection.create(groupKey)
  private val start = new SpecificInternalRow(Seq(LongType))
  private val joined = new JoinedRow

  def apply(row: InternalRow, windowStart: Long): UnsafeRow = {
    start.setLong(0, windowStart)
    project(joined(row, start))
  }
}

/** Counts the invalid rows of a partition per reason, keeping the first of each (its key labels the sentinel). */
private final class InvalidRowCounter(reasonOrdinal: Int) {
  val counts = new Array[Long](InvalidRows.Reasons.max + 1)
  val first = new Array[InternalRow](InvalidRows.Reasons.max + 1)

  /** True (and counted) if the row is invalid. */
  def skip(row: InternalRow): Boolean = {
    val reason = if (reasonOrdinal >= 0) row.getInt(reasonOrdinal) else InvalidRows.Valid
    if (reason == InvalidRows.Valid) false
    else {
      if (counts(reason) == 0) first(reason) = row.copy()
      counts(reason) += 1
      true
    }
  }

  /** One sentinel partial per reason that occurred (see input.InvalidRows), labelled with its first row's key. */
  def sentinels(
      agg: CatalystAggregation,
      keyAttrs: Seq[Attribute],
      policyCols: PolicyColumns,
      in: Seq[Attribute],
      out: PartialOutput): Iterator[InternalRow] =
    InvalidRows.Reasons.iterator.filter(r => counts(r) > 0).map { r =>
      val p = new Partial(agg.newBuffer(), InvalidRows.sentinelStart(r))
      p.rows = counts(r)
      // The sentinel's key (and source) columns, from its first row; a null source stays null.
      val key = InternalRow.fromSeq(keyAttrs.indices.map(i => first(r).get(i, keyAttrs(i).dataType)) ++ Seq(0L) ++
        policyCols.source.map(s => first(r).get(in.indexWhere(_.exprId == s.exprId), s.dataType)).toSeq)
      out.generic(key, p.start, p)
    }
}

/**
 * Builds the output rows of the partial aggregation: payload bytes, window start, row count,
 * max event time, keys. `keptType` is the type of a kept row, when rows are kept.
 */
private final class PartialOutput(
    payloadSchema: StructType,
    outAttrs: Seq[Attribute],
    keyAttrs: Seq[Attribute],
    agg: CatalystAggregation,
    policyCols: PolicyColumns,
    keptType: Option[DataType]) {
  private val n = keyAttrs.size
  private val keyTypes = keyAttrs.map(_.dataType).toArray
  private val project = UnsafeProjection.create(
    outAttrs.indices.map(i => BoundReference(i, outAttrs(i).dataType, outAttrs(i).nullable)))
  private val outer = new SpecificInternalRow(outAttrs.map(_.dataType))
  // Only for on-heap partials (the generic path and sentinels).
  private lazy val projectPayload = UnsafeProjection.create(payloadSchema)
  private lazy val meta = new SpecificInternalRow(Seq(LongType, LongType, LongType))
  private lazy val policyPart = new SpecificInternalRow(
    policyCols.lateness.map(_ => LongType).toSeq ++ policyCols.gap.map(_ => LongType).toSeq ++
      (if (policyCols.eventTimes) Seq(ArrayType(LongType, containsNull = false)) else Nil) ++
      policyCols.source.map(_.dataType).toSeq ++ keptType.toSeq)

  /** The output row (reused by the next call) for a payload; `key` holds the key values first. */
  def apply(key: InternalRow, start: Long, rows: Long, maxEventTime: Long, payload: Array[Byte]): InternalRow = {
    outer.update(0, payload)
    outer.setLong(1, start)
    outer.setLong(2, rows)
    outer.setLong(3, maxEventTime)
    var i = 0
    while (i < n) { outer.update(4 + i, key.get(i, keyTypes(i))); i += 1 }
    project(outer)
  }

  /** The output row of an on-heap [[Partial]]; `key` holds the key values, window start, then the source. */
  def generic(key: InternalRow, start: Long, p: Partial): InternalRow = {
    meta.setLong(0, start)
    meta.setLong(1, p.rows)
    meta.setLong(2, p.maxEventTime)
    var i = 0
    if (policyCols.lateness.isDefined) { policyPart.setLong(i, p.maxLateness); i += 1 }
    if (policyCols.gap.isDefined) { policyPart.setLong(i, p.maxEnd); i += 1 }
    if (policyCols.eventTimes) { policyPart.update(i, new GenericArrayData(p.eventTimes.toArray[Any])); i += 1 }
    policyCols.source.foreach { s => policyPart.update(i, key.get(n + 1, s.dataType)); i += 1 }
    if (keptType.isDefined) policyPart.update(i, p.keptRows)
    val payload = UnsafeRowBytes.bytes(
      projectPayload(new JoinedRow(new JoinedRow(agg.toStored(p.buffer), meta), policyPart)))
    apply(key, start, p.rows, p.maxEventTime, payload)
  }
}
