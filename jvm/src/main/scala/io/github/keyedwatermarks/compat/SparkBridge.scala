// Lives in Spark's package because Dataset.ofRows (a DataFrame from a logical plan) is
// private[sql]. Part of the compat layer: nothing outside compat/ calls it.
package org.apache.spark.sql.keyedwatermarks

import org.apache.spark.sql.{classic, DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

object SparkBridge {
  def ofRows(session: SparkSession, plan: LogicalPlan): DataFrame =
    classic.Dataset.ofRows(session.asInstanceOf[classic.SparkSession], plan)
}
