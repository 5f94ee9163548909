package io.github.keyedwatermarks.partials

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, LogicalPlan, UnaryNode}
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.types.{ArrayType, BinaryType, LongType, StructType}

import io.github.keyedwatermarks.catalyst.{CatalystAggregation, SparkInternals, TwoLevelMapChoice}
import io.github.keyedwatermarks.window.WindowAssigner

/**
 * Pre-aggregation before the shuffle, as Spark's own aggregation does: within each input
 * partition of a micro-batch, rows are folded into one partial per (key, window). Lateness is
 * decided per (key, window) against the watermark at the start of the batch, so a partial is
 * wholly on time or wholly late; it carries its row count (for late accounting) and its max
 * event time (for the watermark). Only partials are shuffled, sorted and handed to the
 * stateful operator.
 *
 * Output and payload layout: [[PartialColumns]]. A partial carries its row count (rows whose
 * last window it is) and max event time besides the aggregate buffers.
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
    val child = SparkInternals.analyzedPlan(input)
    val inputs = child.output
    val buffers = aggregation.bufferSchema.map(f => AttributeReference(f.name, f.dataType, nullable = true)())
    val meta = Seq(PartialColumns.WindowStart, PartialColumns.Rows, PartialColumns.MaxEventTime).map(n =>
      AttributeReference(n, LongType, nullable = false)())
    val kept = if (keepRows) Some(inputs.last) else None
    val keptOut =
      kept.map(a => AttributeReference(PartialColumns.KeptRows, ArrayType(a.dataType, containsNull = false))()).toSeq
    val lateness = inputs.find(_.name == PartialColumns.Lateness)
    val source = inputs.find(_.name == PartialColumns.Source)
    val gap = inputs.find(_.name == PartialColumns.RowSessionEnd)
    val dedup = inputs.find(_.name == PartialColumns.Dedup)
    val arrival = inputs.find(_.name == PartialColumns.Arrival)
    val policyOut =
      lateness.map(_ => AttributeReference(PartialColumns.Lateness, LongType, nullable = false)()).toSeq ++
        gap.map(_ => AttributeReference(PartialColumns.SessionEnd, LongType, nullable = false)()).toSeq ++
        arrival.map(_ => AttributeReference(PartialColumns.Arrival, LongType, nullable = false)()).toSeq ++
        (if (keepEventTimes)
           Seq(AttributeReference(PartialColumns.EventTimes, ArrayType(LongType, containsNull = false),
               nullable = false)())
         else Nil) ++ source.toSeq ++
        dedup.toSeq.flatMap(d =>
          Seq(AttributeReference(PartialColumns.Dedup, d.dataType, nullable = true)(),
            AttributeReference(PartialColumns.DedupPartition, LongType, nullable = false)(),
            AttributeReference(PartialColumns.Duplicates, LongType, nullable = false)()))
    val payload = DataTypeUtils.fromAttributes(buffers ++ meta ++ policyOut ++ keptOut)
    val output = Seq(AttributeReference(PartialColumns.Payload, BinaryType, nullable = false)()) ++
      Seq(PartialColumns.WindowStart, PartialColumns.Rows, PartialColumns.MaxEventTime).map(n =>
        AttributeReference(n, LongType, nullable = false)()) ++
      inputs.take(keyCount)
    val node = KeyedPartialAggregate(
      inputs.take(keyCount), inputs(keyCount), kept, PolicyColumns(lateness, keepEventTimes, source, gap, dedup, arrival),
      windows, aggregation, inputs, payload, output, new TwoLevelMapChoice, child)
    Partials(SparkBridge.ofRows(session, node), payload)
  }
}

/** The partials (see [[PartialAggregation]]) and the schema of their payload. */
private[keyedwatermarks] final case class Partials(frame: DataFrame, payloadSchema: StructType)

/** The watermark-policy inputs a partial carries: lateness column, event times, source. */
private[keyedwatermarks] final case class PolicyColumns(
    lateness: Option[Attribute], eventTimes: Boolean, source: Option[Attribute], gap: Option[Attribute],
    /** The dedup values (a struct): part of the grouping, each partial one row's (see OnHeapPartials). */
    dedup: Option[Attribute] = None,
    /** The rows' arrival time in micros (the arrival clock): the partial keeps its max. */
    arrival: Option[Attribute] = None)

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
   * for at most [[HashAggregatePartials.MaxExpandCopies]] windows per row.
   */
  def sparkHashAggregate: Boolean = keptRow.isEmpty && !policy.eventTimes && policy.source.isEmpty &&
    policy.dedup.isEmpty &&
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
