package io.github.keyedwatermarks.partials

import org.apache.spark.TaskContext
import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenFallback
import org.apache.spark.sql.catalyst.plans.logical.Generate
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{LongType, StructType}

import io.github.keyedwatermarks.catalyst.{CatalystAggregation, SparkInternals}
import io.github.keyedwatermarks.input.ProjectedInput
import io.github.keyedwatermarks.window.WindowAssigner

/**
 * The partials of real-time mode (option `real_time`; docs/semantics.md, "Real-time mode"): each
 * input row becomes its own partials at once, one per window (invalid rows: a sentinel partial
 * each), with the layout of [[PartialAggregation]]'s, so that the operator reads them alike.
 * There is no partial aggregation across rows: Spark's real-time mode runs each task for the
 * whole real-time batch, so a partition's partials would reach the operator only at its end,
 * and Spark allows no aggregation node there. Planned as Spark's own `Generate` over
 * [[RowPartialsGenerator]] (GenerateExec is on the real-time allowlist).
 */
private[keyedwatermarks] object RowPartials {

  /** Same inputs and result as [[PartialAggregation.apply]], one row at a time. */
  def apply(
      input: DataFrame,
      keyCount: Int,
      windows: WindowAssigner,
      aggregation: CatalystAggregation,
      keepRows: Boolean,
      keepEventTimes: Boolean = false): Partials = {
    val session = input.sparkSession
    val child = SparkInternals.analyzedPlan(input)
    // The logical node of the partial aggregation: its payload and output layout, its columns.
    val node = SparkInternals.analyzedPlan(
      PartialAggregation(input, keyCount, windows, aggregation, keepRows, keepEventTimes).frame).collectFirst {
      case p: KeyedPartialAggregate => p
    }.get
    val output = node.output.map(a => AttributeReference(a.name, a.dataType, a.nullable)())
    val generator = RowPartialsGenerator(node.inputs, node.inputs, node.keys, node.eventTime, node.keptRow, node.policy,
      windows, aggregation, node.payload, node.output, DataTypeUtils.fromAttributes(output))
    val generate = Generate(generator, unrequiredChildIndex = child.output.indices, outer = false,
      qualifier = None, generatorOutput = output, child = child)
    Partials(SparkBridge.ofRows(session, generate), node.payload)
  }
}

/**
 * One input row -> its partials (see [[RowPartials]]). `children` are the partial aggregation's
 * input columns `inputs`, position by position (bound or rewritten by Spark; `inputs` only names
 * them: the ordinals of the key and policy columns are found there); `outAttrs` the partial
 * aggregation's output, of schema `elementSchema`.
 */
private[keyedwatermarks] case class RowPartialsGenerator(
    inputs: Seq[Attribute],
    children: Seq[Expression],
    keys: Seq[Attribute],
    eventTime: Attribute,
    keptRow: Option[Attribute],
    policy: PolicyColumns,
    windows: WindowAssigner,
    aggregation: CatalystAggregation,
    payload: StructType,
    outAttrs: Seq[Attribute],
    elementSchema: StructType)
    extends Generator with CodegenFallback {

  override def nullable: Boolean = false
  override def prettyName: String = "kw_row_partials"

  override protected def withNewChildrenInternal(newChildren: IndexedSeq[Expression]): RowPartialsGenerator =
    copy(children = newChildren)

  // Built on first use in each task (neither generated code nor the hash maps are serializable).
  @transient private lazy val state = {
    val in = inputs
    def ordinal(a: Option[Attribute]): Int = a.map(x => in.indexWhere(_.exprId == x.exprId)).getOrElse(-1)
    val keyAttrs = keys
    val columns = PartialInputs(
      keyCount = keyAttrs.size,
      eventTime = ordinal(Some(eventTime)),
      lateness = ordinal(policy.lateness),
      sessionEnd = ordinal(policy.gap),
      arrival = ordinal(policy.arrival),
      eventTimes = policy.eventTimes,
      kept = ordinal(keptRow),
      keptWidth = keptRow.map(_.dataType.asInstanceOf[StructType].length).getOrElse(0),
      stringKey = -1,
      groupKey =
        (keyAttrs.map(k => BindReferences.bindReference[Expression](k, in)) :+
          BoundReference(in.size, LongType, nullable = false)) ++
          policy.source.map(s => BindReferences.bindReference[Expression](s, in)).toSeq ++
          policy.dedup.map(d => BindReferences.bindReference[Expression](d, in)).toSeq,
      dedupKey =
        policy.dedup.map(d => (keyAttrs :+ d).map(a => BindReferences.bindReference[Expression](a, in))).getOrElse(Nil),
      partition = Option(TaskContext.get()).map(_.partitionId().toLong).getOrElse(0L))
    val invalid = new InvalidRowCounter(in.indexWhere(_.name == ProjectedInput.InvalidReasonCode))
    val out = new PartialOutput(payload, outAttrs, keyAttrs, aggregation, policy, keptRow.map(_.dataType))
    (UnsafeProjection.create(children), new OnHeapPartials(aggregation, windows, columns, invalid, out), invalid, out,
      in)
  }

  override def eval(input: InternalRow): IterableOnce[InternalRow] = {
    val (project, partials, invalid, out, in) = state
    val row = project(input)
    val rows = (partials.aggregate(Iterator.single(row)) ++
      invalid.sentinels(aggregation, keys, policy, in, out)).map(_.copy()).toArray
    partials.clear()
    invalid.reset()
    rows
  }
}
