package io.github.keyedwatermarks.connect

import scala.jdk.CollectionConverters._

import org.apache.spark.connect.proto
import org.apache.spark.sql.Column
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.connect.planner.SparkConnectPlanner
import org.apache.spark.sql.keyedwatermarks.SparkBridge

import io.github.keyedwatermarks.planner.{KeyedPlanner, SpecChecks}
import io.github.keyedwatermarks.spec.QueryOptions

/**
 * A [[KeyedWatermarksRelation]] as a logical plan: the same calls as the py4j entry point
 * (`io.github.keyedwatermarks.python.PythonAPI`), with the input relation and the Columns
 * converted by the session's Connect planner. So a Connect session plans the very same query,
 * and bad input raises the very same exceptions, as a classic one.
 */
object ConnectQuery {

  def logicalPlan(message: KeyedWatermarksRelation, planner: SparkConnectPlanner): LogicalPlan = {
    val input = planner.transformRelation(message.input)
    val events = SparkBridge.ofRows(planner.session, input)
    def column(e: proto.Expression): Column = SparkBridge.column(planner.transformExpression(e))
    val columns = message.columns.map { case (name, e) => name -> column(e) }.asJava
    message.step match {
      case KeyedWatermarksRelation.Plan =>
        val spec = QueryOptions.query(message.options, columns, message.aggregates.map(column))
        KeyedPlanner.plan(events, spec).queryExecution.logical
      // Validation only: the client analyses the returned relation (the input) to surface errors
      // when keyed_watermark(...) / .window(...) is called, as the classic API does.
      case KeyedWatermarksRelation.ValidateWatermark =>
        SpecChecks.watermark(QueryOptions.watermark(message.options, columns), events)
        input
      case KeyedWatermarksRelation.ValidateWindows =>
        SpecChecks.windows(QueryOptions.windows(message.options, columns), events)
        input
    }
  }
}
