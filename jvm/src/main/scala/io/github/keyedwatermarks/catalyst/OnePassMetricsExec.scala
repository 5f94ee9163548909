package io.github.keyedwatermarks.catalyst

import scala.collection.mutable

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.catalyst.expressions.{Alias, BindReferences, Expression, NamedExpression}
import org.apache.spark.sql.catalyst.expressions.aggregate.{AggregateExpression, TypedImperativeAggregate}
import org.apache.spark.sql.catalyst.plans.logical.{CollectMetrics, LogicalPlan}
import org.apache.spark.sql.execution.{CollectMetricsExec, SparkPlan, SparkStrategy}
import org.apache.spark.util.AccumulatorV2

/**
 * An observed column that is one field of a tally its observation's columns share: an
 * aggregate whose buffer (the tally) depends only on its children, and whose `eval` reads field
 * `field` of it. An observation made only of these, over the same children, is planned as
 * [[OnePassMetricsExec]].
 */
private[keyedwatermarks] trait TallyField { self: TypedImperativeAggregate[_] =>
  def field: Int

  /**
   * False in a stage planned for Spark's real-time mode: its allowlist of physical nodes goes
   * by class name, and holds `CollectMetricsExec` but not a subclass, so there the observation
   * stays Spark's own node (the same row, column by column).
   */
  def onePass: Boolean
}

/**
 * An observation of [[TallyField]]s in one pass: each task updates ONE tally with its rows (the
 * first column's aggregate, bound to the child's output) and hands its bytes to an accumulator;
 * the driver merges the tallies and evaluates every column on the result.
 *
 * Why not Spark's `CollectMetricsExec`: it runs every column's aggregate on its own over every
 * row, interpreted, builds its update projection in every task, and ships the expressions of all
 * columns with every task's result (Java-serialized with their query contexts). At small
 * micro-batches that was most of what the output metrics cost (benchmarks/results/profile.md).
 * A subclass, because Spark reads a query's observed metrics from the `CollectMetricsExec` nodes
 * of its plan (`CollectMetricsExec.collect`, for a streaming query's progress and for Spark
 * Connect alike).
 */
private[keyedwatermarks] final class OnePassMetricsExec(
    metricsName: String, metrics: Seq[NamedExpression], input: SparkPlan)
    extends CollectMetricsExec(metricsName, metrics, input) {

  private def columns: Seq[TypedImperativeAggregate[Any]] =
    metricExpressions.map(e => OnePassMetricsStrategy.metricOf(e).get)

  @transient private lazy val tallies: LastAttemptTallies = {
    val acc = new LastAttemptTallies
    sparkContext.register(acc, s"keyed-watermarks $name")
    acc
  }

  override def accumulatorId: Long = tallies.id
  override def resetMetrics(): Unit = tallies.reset()

  override def collectedMetrics: Row = {
    val cols = columns
    val all = cols.head.createAggregationBuffer()
    tallies.value.foreach(bytes => cols.head.merge(all, cols.head.deserialize(bytes)))
    val row = InternalRow.fromSeq(cols.map(_.eval(all)))
    CatalystTypeConverters.createToScalaConverter(metricsSchema)(row).asInstanceOf[Row]
  }

  override protected def doExecute(): RDD[InternalRow] = {
    val acc = tallies
    val tally =
      BindReferences.bindReference(columns.head: Expression, child.output).asInstanceOf[TypedImperativeAggregate[Any]]
    child.execute().mapPartitions { rows =>
      val t = tally.createAggregationBuffer()
      // Published when the task completes (as CollectMetricsExec does): the driver never sees a
      // running task's partial tally, and a failed task's updates are not merged.
      TaskContext.get().addTaskCompletionListener[Unit] { ctx =>
        acc.add((ctx.partitionId(), (ctx.stageAttemptNumber().toLong << 32) | ctx.attemptNumber(), tally.serialize(t)))
      }
      rows.map { r => tally.update(t, r); r }
    }
  }

  override def withNewChildInternal(newChild: SparkPlan): CollectMetricsExec =
    new OnePassMetricsExec(name, metricExpressions, newChild)
}

/**
 * The tallies of a micro-batch's tasks: per partition, that of its last attempt, so a stage that
 * runs again replaces its first attempt's counts instead of adding to them (what Spark 4.3's
 * `CollectMetricsExec` does too). Input: (partition, attempt, tally bytes).
 */
private[keyedwatermarks] final class LastAttemptTallies
    extends AccumulatorV2[(Int, Long, Array[Byte]), Seq[Array[Byte]]] {
  private val byPartition = mutable.HashMap.empty[Int, (Long, Array[Byte])]

  override def isZero: Boolean = byPartition.isEmpty
  override def copy(): LastAttemptTallies = {
    val c = new LastAttemptTallies
    c.byPartition ++= byPartition
    c
  }
  override def reset(): Unit = byPartition.clear()
  override def add(v: (Int, Long, Array[Byte])): Unit = {
    val (partition, attempt, bytes) = v
    if (byPartition.get(partition).forall(_._1 <= attempt)) byPartition(partition) = (attempt, bytes)
  }
  override def merge(other: AccumulatorV2[(Int, Long, Array[Byte]), Seq[Array[Byte]]]): Unit =
    other.asInstanceOf[LastAttemptTallies].byPartition.foreach { case (p, (a, b)) => add((p, a, b)) }
  override def value: Seq[Array[Byte]] = byPartition.values.map(_._2).toSeq
}

/** Plans an observation made only of [[TallyField]]s of one class over the same children as [[OnePassMetricsExec]]. */
private[keyedwatermarks] object OnePassMetricsStrategy extends SparkStrategy {
  def metricOf(e: NamedExpression): Option[TypedImperativeAggregate[Any] with TallyField] = e match {
    case Alias(ae: AggregateExpression, _) if !ae.isDistinct && ae.filter.isEmpty =>
      ae.aggregateFunction match {
        case m: TypedImperativeAggregate[_] with TallyField =>
          Some(m.asInstanceOf[TypedImperativeAggregate[Any] with TallyField])
        case _ => None
      }
    case _ => None
  }

  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case c: CollectMetrics if onePass(c.metrics) => new OnePassMetricsExec(c.name, c.metrics, planLater(c.child)) :: Nil
    case _ => Nil
  }

  private def onePass(metrics: Seq[NamedExpression]): Boolean = {
    val found = metrics.map(metricOf)
    found.nonEmpty && found.forall(_.exists(_.onePass)) && {
      val first = found.head.get
      found.flatten.forall(m =>
        m.getClass == first.getClass && m.children.length == first.children.length &&
          m.children.zip(first.children).forall { case (a, b) => a.semanticEquals(b) })
    }
  }
}
