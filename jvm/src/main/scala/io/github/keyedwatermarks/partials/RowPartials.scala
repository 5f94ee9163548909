package io.github.keyedwatermarks.partials

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenFallback
import org.apache.spark.sql.catalyst.plans.logical.Generate
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.StructType

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

  /**
   * The partials of `micro`, a partial aggregation ([[PartialAggregation.apply]]), one row at a
   * time: its input, columns, payload and output layout, without the aggregation across rows.
   */
  def apply(micro: Partials): Partials = {
    // The logical node of the partial aggregation: its payload and output layout, its columns.
    val node = SparkInternals.analyzedPlan(micro.frame).collectFirst { case p: KeyedPartialAggregate => p }.get
    val child = node.child
    val (windows, aggregation) = (node.windows, node.aggregation)
    val output = node.output.map(a => AttributeReference(a.name, a.dataType, a.nullable)())
    val generator = RowPartialsGenerator(node.inputs, node.inputs, node.keys, node.eventTime, node.keptRow, node.policy,
      windows, aggregation, node.payload, node.output, DataTypeUtils.fromAttributes(output))
    val generate = Generate(generator, unrequiredChildIndex = child.output.indices, outer = false,
      qualifier = None, generatorOutput = output, child = child)
    Partials(SparkBridge.ofRows(micro.frame.sparkSession, generate), node.payload)
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
    val keyAttrs = keys
    val columns = PartialInputs.bind(in, keyAttrs, eventTime, keptRow, policy, stringKeys = false)
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
