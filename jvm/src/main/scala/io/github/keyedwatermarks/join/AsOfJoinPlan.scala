package io.github.keyedwatermarks.join

import org.apache.spark.sql.{DataFrame, Encoders, functions => F}
import org.apache.spark.sql.streaming.{OutputMode, TimeMode}
import org.apache.spark.sql.types.{StringType, StructField, StructType}

import io.github.keyedwatermarks.catalyst.TaskReadyEncoder
import io.github.keyedwatermarks.planner.KeyedPlanner
import io.github.keyedwatermarks.spec.DurationOption

/**
 * Plans the per-key as-of join (docs/semantics.md, "As-of join"): checks both sides before
 * any query starts, then `transformWithState` ([[AsOfJoinProcessor]], event-time mode) over
 * the union of the two sides grouped by key ([[JoinInputs]]: readings the first side, versions
 * the second).
 * Spark's watermark is defined on the versions side only (`versions_delay`) and no column of the
 * operator's input carries it, so Spark drops no row on the join's behalf: the processor reads
 * it as the versions watermark that releases held readings. The join's metrics are observed on
 * its output ([[JoinMetrics]]).
 */
private[keyedwatermarks] object AsOfJoinPlan {
  private val Fn = "as_of_join"
  val ReadingSide: Int = JoinInputs.FirstSide
  val VersionSide: Int = JoinInputs.SecondSide
  val StatusColumn: String = JoinInputs.StatusColumn
  val Joined = "joined"
  val NoVersion = "no_version"
  val Late = "late"
  val Invalid = "invalid"
  /** The output statuses, in the order the metrics rows count them. */
  val Statuses: Seq[String] = Seq(Joined, NoVersion, Late, Invalid)

  /** What the processor needs: both sides' schemas, the input's ordinals, the output's layout. */
  final case class Operator(readingSchema: StructType, versionSchema: StructType, keyCount: Int,
      latenessMicros: Long, versionOutput: Array[Int]) {
    private val layout = JoinInputs.Layout(keyCount)
    val sideOrdinal: Int = layout.sideOrdinal
    val timeOrdinal: Int = layout.timeOrdinal
    val readingOrdinal: Int = layout.firstOrdinal
    val versionOrdinal: Int = layout.secondOrdinal
    val output: JoinOutput =
      JoinOutput(readingSchema.length, versionOutput, Array.empty, Statuses) // readings always set
  }

  def plan(readings: DataFrame, versions: DataFrame, keys: Seq[String], readingTime: String, versionTime: String,
      lateness: String, versionsDelay: String, name: Option[String] = None): DataFrame = {
    val latenessOption = DurationOption.nonNegative("lateness", lateness)
    val delay = DurationOption.nonNegative("versions_delay", versionsDelay)
    val readingSide = JoinInputs.Side("readings", readings, readingTime, "reading_time")
    JoinInputs.check(Fn, keys, readingSide, JoinInputs.Side("versions", versions, versionTime, "version_time"),
      watermarkRefused = Some("the join defines it on the versions side itself (versions_delay)"))
    val versionOutput = JoinInputs.secondOutput(keys, versions)
    JoinInputs.refuseClashes(Fn, readings, versionOutput.map(_._1.name).toIndexedSeq,
      "readings and the output's version columns")
    KeyedPlanner.requireRocksDb(readings)
    val op = Operator(readings.schema, versions.schema, keys.size, latenessOption.micros,
      versionOutput.map(_._2))
    val watermarked = versions.withWatermark(versionTime, delay.text)
    val (both, keySchema) = JoinInputs.union(keys, readingSide,
      JoinInputs.Side("versions", watermarked, versionTime, "version_time"))
    val output = StructType(readings.schema.fields ++
      versionOutput.map(_._1.copy(nullable = true)) :+ StructField(StatusColumn, StringType, nullable = false))
    val metricsName = JoinMetrics.name(name, keys, both)
    val out = both.groupBy(keySchema.fieldNames.toIndexedSeq.map(F.col): _*)
      .as(TaskReadyEncoder.row(keySchema), Encoders.row(both.schema))
      .transformWithState(new AsOfJoinProcessor(op), TimeMode.EventTime(), OutputMode.Append())(
        Encoders.row(JoinMetrics.operatorSchema(output, Statuses)))
      .toDF()
    JoinMetrics.observed(out, metricsName, Statuses, output)
  }
}
