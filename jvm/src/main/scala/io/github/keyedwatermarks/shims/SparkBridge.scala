// Lives in Spark's package because Dataset.ofRows (a DataFrame from a logical plan) and
// ExpressionUtils (Column <-> Catalyst expression) are private[sql]: the plan nodes and
// expressions of partials/ and catalyst/, and the Spark Connect plugin, go through it.
package org.apache.spark.sql.keyedwatermarks

import org.apache.spark.sql.{classic, Column, DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

object SparkBridge {
  def ofRows(session: SparkSession, plan: LogicalPlan): DataFrame =
    classic.Dataset.ofRows(session.asInstanceOf[classic.SparkSession], plan)

  def column(expression: Expression): Column = classic.ExpressionUtils.column(expression)

  def expression(column: Column): Expression = classic.ExpressionUtils.expression(column)
}
