package io.github.keyedwatermarks.shims

import org.apache.spark.sql.catalyst.expressions.{Attribute, Expression, NamedExpression}
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.execution.aggregate.HashAggregateExec
import org.apache.spark.sql.internal.SQLConf

/**
 * Spark's HashAggregateExec with the two-level map off, whatever the session says: the same
 * node, read with a copy of the session's settings that turns
 * `spark.sql.codegen.aggregate.map.twolevel.enabled` off (read when the code is generated).
 */
private[keyedwatermarks] final class HashAggregateWithoutTwoLevelMap(
    requiredChildDistributionExpressions: Option[Seq[Expression]],
    isStreaming: Boolean,
    numShufflePartitions: Option[Int],
    groupingExpressions: Seq[NamedExpression],
    aggregateExpressions: Seq[AggregateExpression],
    aggregateAttributes: Seq[Attribute],
    initialInputBufferOffset: Int,
    resultExpressions: Seq[NamedExpression],
    child: SparkPlan)
    extends HashAggregateExec(requiredChildDistributionExpressions, isStreaming, numShufflePartitions,
      groupingExpressions, aggregateExpressions, aggregateAttributes, initialInputBufferOffset, resultExpressions,
      child) {

  @transient private lazy val withoutTwoLevelMap: SQLConf = {
    val c = super.conf.clone()
    c.setConf(SQLConf.ENABLE_TWOLEVEL_AGG_MAP, false)
    c
  }

  override def conf: SQLConf = withoutTwoLevelMap

  // Spark's own copy (case-class copy) would drop the subclass: copy, then wrap again.
  override def withNewChildInternal(newChild: SparkPlan): HashAggregateExec =
    HashAggregateWithoutTwoLevelMap(super.withNewChildInternal(newChild))

  override def nodeName: String = "HashAggregate"
  override def simpleString(maxFields: Int): String = super.simpleString(maxFields) + " (two-level map off)"
}

private[keyedwatermarks] object HashAggregateWithoutTwoLevelMap {
  /** `spark`, the same node, with the two-level map off. */
  def apply(spark: HashAggregateExec): HashAggregateWithoutTwoLevelMap = new HashAggregateWithoutTwoLevelMap(
    spark.requiredChildDistributionExpressions, spark.isStreaming, spark.numShufflePartitions,
    spark.groupingExpressions, spark.aggregateExpressions, spark.aggregateAttributes,
    spark.initialInputBufferOffset, spark.resultExpressions, spark.child)
}
