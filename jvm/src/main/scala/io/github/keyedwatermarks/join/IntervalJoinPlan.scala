package io.github.keyedwatermarks.join

import org.apache.spark.sql.{DataFrame, Encoders, functions => F}
import org.apache.spark.sql.streaming.{OutputMode, TimeMode}
import org.apache.spark.sql.types.{StringType, StructField, StructType}

import io.github.keyedwatermarks.catalyst.TaskReadyEncoder
import io.github.keyedwatermarks.planner.KeyedPlanner
import io.github.keyedwatermarks.spec.DurationOption

/**
 * Plans the keyed interval join (docs/semantics.md, "Interval join"): checks both sides before
 * any query starts, then `transformWithState` ([[IntervalJoinProcessor]], no time mode) over
 * the union of the two sides grouped by key ([[JoinInputs]]: left the first side, right the
 * second). Each key's watermarks are its own, kept in the operator's state: Spark's watermark
 * plays no part, and a `withWatermark` upstream (for a later stage of Spark's) drops no row here.
 * The join's metrics are observed on its output ([[JoinMetrics]]).
 */
private[keyedwatermarks] object IntervalJoinPlan {
  private val Fn = "interval_join"
  val Joined = "joined"
  val Unmatched = "unmatched"
  val Late = "late"
  val Invalid = "invalid"
  /** The output statuses, in the order the metrics rows count them. */
  val Statuses: Seq[String] = Seq(Joined, Unmatched, Late, Invalid)

  /** What the processor needs: both sides' schemas, the input's ordinals, the rule, the output's layout. */
  final case class Operator(leftSchema: StructType, rightSchema: StructType, layout: JoinInputs.Layout,
      bounds: IntervalRule.Bounds, kind: IntervalRule.Kind, output: JoinOutput)

  def plan(left: DataFrame, right: DataFrame, keys: Seq[String], leftTime: String, rightTime: String,
      before: String, after: String, lateness: String, how: String, name: Option[String] = None): DataFrame = {
    val bounds = IntervalRule.Bounds(DurationOption.nonNegative("before", before).micros,
      DurationOption.nonNegative("after", after).micros, DurationOption.nonNegative("lateness", lateness).micros)
    val kind = IntervalRule.Kind.parse(how)
    val leftSide = JoinInputs.Side("left", left, leftTime, "left_time")
    val rightSide = JoinInputs.Side("right", right, rightTime, "right_time")
    JoinInputs.check(Fn, keys, leftSide, rightSide, watermarkRefused = None)
    val rightOutput = JoinInputs.secondOutput(keys, right)
    JoinInputs.refuseClashes(Fn, left, rightOutput.map(_._1.name).toIndexedSeq, "left and right")
    KeyedPlanner.requireRocksDb(left)
    val output = JoinOutput(left.schema.length, rightOutput.map(_._2),
      keys.map(k => (left.schema.fieldIndex(k), right.schema.fieldIndex(k))).toArray, Statuses)
    val op = Operator(left.schema, right.schema, JoinInputs.Layout(keys.size), bounds, kind, output)
    val (both, keySchema) = JoinInputs.union(keys, leftSide, rightSide)
    // A row of the right side alone (late, invalid) has null left columns but its keys, which
    // are the right side's: a key column is nullable when it is on either side.
    def nullable(f: StructField): Boolean =
      if (keys.contains(f.name)) f.nullable || right.schema(f.name).nullable else true
    val schema = StructType(left.schema.fields.map(f => f.copy(nullable = nullable(f))) ++
      rightOutput.map(_._1.copy(nullable = true)) :+
      StructField(JoinInputs.StatusColumn, StringType, nullable = false))
    val metricsName = JoinMetrics.name(name, keys, both)
    val out = both.groupBy(keySchema.fieldNames.toIndexedSeq.map(F.col): _*)
      .as(TaskReadyEncoder.row(keySchema), Encoders.row(both.schema))
      .transformWithState(new IntervalJoinProcessor(op), TimeMode.None(), OutputMode.Append())(
        Encoders.row(JoinMetrics.operatorSchema(schema, Statuses)))
      .toDF()
    JoinMetrics.observed(out, metricsName, Statuses, schema)
  }
}
