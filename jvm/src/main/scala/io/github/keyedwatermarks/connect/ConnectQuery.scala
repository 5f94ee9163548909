package io.github.keyedwatermarks.connect

import scala.jdk.CollectionConverters._

import org.apache.spark.connect.proto
import org.apache.spark.sql.{Column, DataFrame}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.connect.planner.SparkConnectPlanner
import org.apache.spark.sql.keyedwatermarks.SparkBridge

import io.github.keyedwatermarks.{KeyedAsOfJoin, KeyedIntervalJoin}
import io.github.keyedwatermarks.planner.{KeyedPlanner, SpecChecks}
import io.github.keyedwatermarks.spec.QueryOptions

/**
 * A [[KeyedWatermarksRelation]] as a logical plan: the same calls as the py4j entry points
 * (`io.github.keyedwatermarks.python.PythonAPI`, `KeyedAsOfJoin`, `KeyedIntervalJoin`), with
 * the input relations and the Columns converted by the session's Connect planner. So a Connect
 * session plans the very same query, and bad input raises the very same exceptions, as a
 * classic one.
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
      case KeyedWatermarksRelation.AsOfJoin =>
        val a = QueryOptions.joinArguments(message.options, AsOfJoinArguments)
        KeyedAsOfJoin(events, second(message, planner), a.keys, a("reading_time"), a("version_time"),
          a("lateness"), a("versions_delay"), a.name).queryExecution.logical
      case KeyedWatermarksRelation.IntervalJoin =>
        val a = QueryOptions.joinArguments(message.options, IntervalJoinArguments)
        KeyedIntervalJoin(events, second(message, planner), a.keys, a("left_time"), a("right_time"), a("before"),
          a("after"), a("lateness"), a("how"), a.name).queryExecution.logical
    }
  }

  // The joins' keyword arguments other than the two DataFrames and the key (all strings).
  private val AsOfJoinArguments = Seq("reading_time", "version_time", "lateness", "versions_delay")
  private val IntervalJoinArguments = Seq("left_time", "right_time", "before", "after", "lateness", "how")

  private def second(message: KeyedWatermarksRelation, planner: SparkConnectPlanner): DataFrame = {
    val other = message.other.getOrElse(
      throw new IllegalArgumentException(s"${KeyedWatermarksRelation.TypeName}: a join's second relation is missing"))
    SparkBridge.ofRows(planner.session, planner.transformRelation(other))
  }
}
