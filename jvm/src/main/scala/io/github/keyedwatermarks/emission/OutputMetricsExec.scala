package io.github.keyedwatermarks.emission

import scala.collection.mutable

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.catalyst.expressions.{Alias, BindReferences, NamedExpression}
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.catalyst.plans.logical.{CollectMetrics, LogicalPlan}
import org.apache.spark.sql.execution.{CollectMetricsExec, SparkPlan, SparkStrategy}
import org.apache.spark.unsafe.types.UTF8String
import org.apache.spark.util.AccumulatorV2

/**
 * The observation of [[OutputMetrics]] in one pass: each task adds its rows to one
 * [[OutputTally]] (a few counters, and the "key" rows' tallies merged) and hands it, as bytes,
 * to an accumulator; the driver merges the tallies and reads every column from the result.
 *
 * Why not Spark's `CollectMetricsExec`: it runs every column's aggregate on its own over every
 * row, interpreted, builds its update projection in every task, and ships the expressions of all
 * 14 columns with every task's result (Java-serialized with their query contexts). At small
 * micro-batches that was most of what the per-key metrics cost (benchmarks/results/profile.md).
 * A subclass, because Spark reads a query's observed metrics from the `CollectMetricsExec` nodes
 * of its plan (`CollectMetricsExec.collect`, for a streaming query's progress and for Spark
 * Connect alike).
 */
private[keyedwatermarks] final class OutputMetricsExec(
    metricsName: String, metrics: Seq[NamedExpression], input: SparkPlan)
    extends CollectMetricsExec(metricsName, metrics, input) {

  /** The field of [[OutputMetrics]]' row each column reads, in the columns' order. */
  private val fields: Seq[Int] = metricExpressions.map(e => OutputMetricsStrategy.metricOf(e).get.field)

  @transient private lazy val tallies: LastAttemptTallies = {
    val acc = new LastAttemptTallies
    sparkContext.register(acc, s"keyed-watermarks $name")
    acc
  }

  override def accumulatorId: Long = tallies.id
  override def resetMetrics(): Unit = tallies.reset()

  override def collectedMetrics: Row = {
    val all = tallies.value.row
    val types = OutputMetrics.CountsSchema ++ KeyTally.MetricsSchema
    val row = InternalRow.fromSeq(fields.map(f => all.get(f, types(f).dataType)))
    CatalystTypeConverters.createToScalaConverter(metricsSchema)(row).asInstanceOf[Row]
  }

  override protected def doExecute(): RDD[InternalRow] = {
    val acc = tallies
    val first = OutputMetricsStrategy.metricOf(metricExpressions.head).get
    val kind = BindReferences.bindReference(first.kind, child.output)
    val late = BindReferences.bindReference(first.late, child.output)
    val tally = BindReferences.bindReference(first.tally, child.output)
    child.execute().mapPartitions { rows =>
      val t = new OutputTally
      val task = TaskContext.get()
      // Published once the task's rows are all read (as CollectMetricsExec does), so the driver
      // never sees a part of a task.
      task.addTaskCompletionListener[Unit] { ctx =>
        acc.add((ctx.partitionId(), (ctx.stageAttemptNumber().toLong << 32) | ctx.attemptNumber(), t.toBytes))
      }
      rows.map { r => t.add(kind.eval(r).asInstanceOf[UTF8String], late.eval(r), tally.eval(r)); r }
    }
  }

  override def withNewChildInternal(newChild: SparkPlan): CollectMetricsExec =
    new OutputMetricsExec(name, metricExpressions, newChild)
}

/**
 * The output tallies of a micro-batch's tasks: per partition, that of its last attempt, so a
 * stage that runs again replaces its first attempt's counts instead of adding to them (what
 * Spark 4.3's `CollectMetricsExec` does too). Input: (partition, attempt, tally bytes).
 */
private[keyedwatermarks] final class LastAttemptTallies extends AccumulatorV2[(Int, Long, Array[Byte]), OutputTally] {
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
  override def merge(other: AccumulatorV2[(Int, Long, Array[Byte]), OutputTally]): Unit =
    other.asInstanceOf[LastAttemptTallies].byPartition.foreach { case (p, (a, b)) => add((p, a, b)) }
  override def value: OutputTally = {
    val all = new OutputTally
    byPartition.values.foreach { case (_, bytes) => all.merge(OutputTally.fromBytes(bytes)) }
    all
  }
}

/** Plans an observation made only of [[OutputMetric]]s over the same columns as [[OutputMetricsExec]]. */
private[keyedwatermarks] object OutputMetricsStrategy extends SparkStrategy {
  def metricOf(e: NamedExpression): Option[OutputMetric] = e match {
    case Alias(ae: AggregateExpression, _) if !ae.isDistinct && ae.filter.isEmpty =>
      ae.aggregateFunction match {
        case m: OutputMetric => Some(m)
        case _ => None
      }
    case _ => None
  }

  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case c: CollectMetrics if ours(c.metrics) => new OutputMetricsExec(c.name, c.metrics, planLater(c.child)) :: Nil
    case _ => Nil
  }

  private def ours(metrics: Seq[NamedExpression]): Boolean = {
    val found = metrics.map(metricOf)
    found.nonEmpty && found.forall(_.isDefined) && found.flatten.map(m => Seq(m.kind, m.late, m.tally)).forall { c =>
      c.zip(found.head.get.children).forall { case (a, b) => a.semanticEquals(b) }
    }
  }
}
