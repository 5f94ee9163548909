// Lives in Spark's package because Dataset.ofRows (a DataFrame from a logical plan) and
// ExpressionUtils.column (a Column from a Catalyst expression) are private[sql]: the Connect
// planner hands over logical plans and expressions, the keyed-watermarks API takes DataFrames
// and Columns. Only the Connect plugin (io.github.keyedwatermarks.connect) calls it.
package org.apache.spark.sql.keyedwatermarks.connect

import org.apache.spark.sql.{classic, Column, DataFrame}
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.keyedwatermarks.SparkBridge

object ConnectBridge {
  def ofRows(session: classic.SparkSession, plan: LogicalPlan): DataFrame = classic.Dataset.ofRows(session, plan)

  def column(expression: Expression): Column = SparkBridge.column(expression)
}
