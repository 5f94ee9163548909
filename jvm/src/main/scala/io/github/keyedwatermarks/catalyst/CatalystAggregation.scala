package io.github.keyedwatermarks.catalyst

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.aggregate._
import org.apache.spark.sql.catalyst.plans.logical.{Aggregate, LogicalPlan}
import org.apache.spark.sql.types.{StructField, StructType}

/**
 * Evaluates the Catalyst aggregate functions that Spark resolved for
 * `events.groupBy(keys, window).agg(...)`, one buffer per (key, window), with Spark's own
 * declarative expressions (compiled into mutable projections) and imperative functions.
 * We never re-implement aggregate math: this is the same buffer protocol Spark's
 * AggregationIterator drives (initialize, update, merge, evaluate), including
 * TypedImperativeAggregate's object buffers, which are serialized only when stored.
 *
 * Buffers come in two forms:
 *  - live: a SpecificInternalRow being updated/merged in this batch (typed-imperative slots
 *    hold objects);
 *  - stored: the same layout with typed-imperative slots serialized to bytes; this is what
 *    goes to the state store and can be the right-hand side of merge().
 */
private[keyedwatermarks] final class CatalystAggregation private (
    aggregateExpressions: Seq[AggregateExpression],
    inputAttributes: Seq[Attribute],
    groupingAttributes: Seq[Attribute],
    resultExpressions: Seq[NamedExpression])
    extends Serializable {

  private val functions: Array[AggregateFunction] = {
    var offset = 0
    aggregateExpressions.map { ae =>
      val fn = ae.aggregateFunction match {
        case d: DeclarativeAggregate => d
        case i: ImperativeAggregate =>
          BindReferences.bindReference(
            i.withNewMutableAggBufferOffset(offset).withNewInputAggBufferOffset(offset),
            inputAttributes)
        case other => throw new IllegalArgumentException(s"agg: unsupported aggregate function ${other.sql}")
      }
      offset += fn.aggBufferAttributes.length
      fn
    }.toArray
  }

  private val bufferAttributes: Seq[AttributeReference] = functions.toSeq.flatMap(_.aggBufferAttributes)
  private val inputBufferAttributes: Seq[AttributeReference] =
    functions.toSeq.flatMap(_.inputAggBufferAttributes)

  private val imperatives: Array[ImperativeAggregate] = functions.collect { case i: ImperativeAggregate => i }
  private val typedImperatives: Array[TypedImperativeAggregate[_]] =
    functions.collect { case t: TypedImperativeAggregate[_] => t }
  /** Buffer ordinal of each typed imperative aggregate (its one, serialized, buffer field). */
  private val typedImperativeOrdinals: Array[Int] = {
    val starts = functions.map(_.aggBufferAttributes.length).scanLeft(0)(_ + _)
    functions.indices.filter(i => functions(i).isInstanceOf[TypedImperativeAggregate[_]]).map(starts(_)).toArray
  }

  /** Schema of a stored buffer; field names are Avro-safe (b0, b1, ...) for the state store. */
  val bufferSchema: StructType = StructType(bufferAttributes.zipWithIndex.map { case (a, i) =>
    StructField(s"b$i", a.dataType, nullable = true)
  })

  private def declarativeOrNoOp(f: DeclarativeAggregate => Seq[Expression]): Seq[Expression] =
    functions.toSeq.flatMap {
      case d: DeclarativeAggregate => f(d)
      case i => Seq.fill(i.aggBufferAttributes.length)(NoOp)
    }

  // Generated code is not serializable: the projections are lent on each executor, lazily
  // (ProjectionPool: each use below sets its target first).
  @transient private lazy val initProjection: MutableProjection =
    ProjectionPool.mutable(declarativeOrNoOp(_.initialValues), Nil)
  @transient private lazy val updateProjection: MutableProjection =
    ProjectionPool.mutable(declarativeOrNoOp(_.updateExpressions), bufferAttributes ++ inputAttributes)
  @transient private lazy val mergeProjection: MutableProjection =
    ProjectionPool.mutable(declarativeOrNoOp(_.mergeExpressions), bufferAttributes ++ inputBufferAttributes)
  @transient private lazy val evaluateProjection: MutableProjection = ProjectionPool.mutable(
    functions.toSeq.map {
      case d: DeclarativeAggregate => d.evaluateExpression
      case i => i
    }, bufferAttributes)
  @transient private lazy val resultProjection: UnsafeProjection = {
    val resultAttributes = aggregateExpressions.map(_.resultAttribute)
    val byAggregate = aggregateExpressions.map(_.canonicalized).zip(resultAttributes).toMap
    val rewritten = resultExpressions.map(_.transformDown {
      case ae: AggregateExpression => byAggregate(ae.canonicalized)
    }.asInstanceOf[NamedExpression])
    ProjectionPool.unsafe(rewritten, groupingAttributes ++ resultAttributes)
  }
  @transient private lazy val joined = new JoinedRow
  @transient private lazy val evaluated = new SpecificInternalRow(aggregateExpressions.map(_.dataType))

  /**
   * The resolved aggregate expressions (deduplicated), over `inputs`: the input columns as the
   * plan now names them, in the order of `inputAttributes` (a streaming query gives the
   * source's columns new attribute ids every micro-batch).
   */
  def aggregateExpressionsOver(inputs: Seq[Attribute]): Seq[AggregateExpression] = {
    require(inputs.size == inputAttributes.size, s"expected ${inputAttributes.size} input columns, got ${inputs.size}")
    val renamed = inputAttributes.map(_.exprId).zip(inputs).toMap
    aggregateExpressions.map(_.transform {
      case a: AttributeReference if renamed.contains(a.exprId) => renamed(a.exprId)
    }.asInstanceOf[AggregateExpression])
  }

  def newBuffer(): InternalRow = {
    val buffer = new SpecificInternalRow(bufferAttributes.map(_.dataType))
    initProjection.target(buffer)(InternalRow.empty)
    imperatives.foreach(_.initialize(buffer))
    buffer
  }

  /**
   * Declarative buffers of non-primitive type (first/min/max of a string, ...) keep references
   * into the input row, so a reused input row must be copied before update().
   */
  val retainsInputReferences: Boolean = functions.exists {
    case d: DeclarativeAggregate => d.aggBufferAttributes.exists(a => !UnsafeRow.isFixedLength(a.dataType))
    case _ => false
  }

  def update(buffer: InternalRow, input: InternalRow): Unit = {
    updateProjection.target(buffer)(joined(buffer, input))
    var i = 0
    while (i < imperatives.length) { imperatives(i).update(buffer, input); i += 1 }
  }

  /** Merges a stored (or live) buffer into a live one. */
  def merge(buffer: InternalRow, other: InternalRow): Unit = {
    mergeProjection.target(buffer)(joined(buffer, other))
    var i = 0
    while (i < imperatives.length) { imperatives(i).merge(buffer, other); i += 1 }
  }

  /**
   * Turns a live buffer into its stored form, in place. Serialized buffers are copied: Spark's
   * serializers may return the backing array of a reused UnsafeRow, which the next call would
   * overwrite while an earlier window still refers to it.
   */
  def toStored(buffer: InternalRow): InternalRow = {
    var i = 0
    while (i < typedImperatives.length) {
      typedImperatives(i).serializeAggregateBufferInPlace(buffer)
      val offset = typedImperativeOrdinals(i)
      if (!buffer.isNullAt(offset)) buffer.update(offset, buffer.getBinary(offset).clone())
      i += 1
    }
    buffer
  }

  /** A live buffer holding the contents of a stored one. */
  def fromStored(stored: InternalRow): InternalRow = {
    val buffer = newBuffer()
    merge(buffer, stored)
    buffer
  }

  /** The output row (grouping columns and aggregate results, as Spark's Aggregate lays them out). */
  def result(groupingValues: InternalRow, buffer: InternalRow): InternalRow = {
    evaluateProjection.target(evaluated)(buffer)
    resultProjection(joined(groupingValues, evaluated))
  }
}

private[keyedwatermarks] object CatalystAggregation {

  /**
   * Builds the evaluator from the analyzed plan of `events.groupBy(keys, window).agg(aggs)`.
   * `inputAttributes` are the columns of the rows that will be fed to update().
   */
  /** The input attributes (by expression id) that the aggregate functions of `plan` read. */
  def referencedInputs(plan: LogicalPlan): Set[ExprId] =
    plan.flatMap(_.expressions).flatMap(_.collect { case ae: AggregateExpression => ae }).flatMap(_.references)
      .map(_.exprId).toSet

  def fromAnalyzedAggregate(plan: LogicalPlan, inputAttributes: Seq[Attribute]): CatalystAggregation = {
    val aggregate = plan.collectFirst { case a: Aggregate => a }.getOrElse(
      throw new IllegalArgumentException(s"expected an aggregation plan, got:\n$plan"))
    val groupingAttributes = aggregate.groupingExpressions.map {
      case a: Attribute => a
      case other => throw new IllegalArgumentException(s"unsupported grouping expression: $other")
    }
    val aggregates = aggregate.aggregateExpressions.flatMap(_.collect { case ae: AggregateExpression => ae })
      .foldLeft(Vector.empty[AggregateExpression]) { (seen, ae) =>
        if (seen.exists(_.canonicalized == ae.canonicalized)) seen else seen :+ ae
      }
    aggregates.foreach { ae =>
      if (ae.isDistinct) throw new IllegalArgumentException(
        s"agg: DISTINCT aggregates are not supported yet: ${ae.sql}; use approx_count_distinct")
      if (ae.filter.isDefined) throw new IllegalArgumentException(
        s"agg: aggregate FILTER clauses are not supported yet: ${ae.sql}")
      val missing = ae.aggregateFunction.references.filterNot(r => inputAttributes.exists(_.exprId == r.exprId))
      if (missing.nonEmpty) throw new IllegalArgumentException(
        s"agg: ${ae.sql} refers to ${missing.mkString(", ")}, which is not a column of the input")
    }
    if (aggregates.isEmpty) throw new IllegalArgumentException("agg: at least one aggregate function is required")
    new CatalystAggregation(aggregates, inputAttributes, groupingAttributes, aggregate.aggregateExpressions)
  }
}
