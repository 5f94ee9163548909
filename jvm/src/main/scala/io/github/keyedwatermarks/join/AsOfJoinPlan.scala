package io.github.keyedwatermarks.join

import org.apache.spark.sql.{Column, DataFrame, Encoders, functions => F}
import org.apache.spark.sql.streaming.{OutputMode, TimeMode}
import org.apache.spark.sql.types.{DataType, StringType, StructField, StructType, TimestampType}

import io.github.keyedwatermarks.catalyst.SparkInternals
import io.github.keyedwatermarks.planner.{KeyedPlanner, KeyedStages}
import io.github.keyedwatermarks.spec.{DurationOption, OptionError}

/**
 * Plans the per-key as-of join (docs/semantics.md, "As-of join"): checks both sides before
 * any query starts, then `transformWithState` ([[AsOfJoinProcessor]], event-time mode) over
 * the union of the two sides grouped by key, one row per side's row:
 * `kw_k0..kw_kN` (the keys), `kw_side` (0 reading, 1 version), `kw_time` (microseconds),
 * `kw_reading` (the reading's columns, a struct) and `kw_version` (the version's, a struct).
 * Spark's watermark is defined on the versions side only (`versions_delay`) and no column of the
 * operator's input carries it, so Spark drops no row on the join's behalf: the processor reads
 * it as the versions watermark that releases held readings.
 */
private[keyedwatermarks] object AsOfJoinPlan {
  val ReadingSide = 0
  val VersionSide = 1
  val StatusColumn = "join_status"
  val Joined = "joined"
  val NoVersion = "no_version"
  val Late = "late"
  val Invalid = "invalid"

  /** What the processor needs: both sides' schemas, the input's ordinals, the output's layout. */
  final case class Operator(readingSchema: StructType, versionSchema: StructType, keyCount: Int,
      latenessMicros: Long, versionOutput: Array[Int]) {
    val sideOrdinal: Int = keyCount
    val timeOrdinal: Int = keyCount + 1
    val readingOrdinal: Int = keyCount + 2
    val versionOrdinal: Int = keyCount + 3
    val outputWidth: Int = readingSchema.length + versionOutput.length + 1
  }

  def plan(readings: DataFrame, versions: DataFrame, keys: Seq[String], readingTime: String, versionTime: String,
      lateness: String, versionsDelay: String): DataFrame = {
    val latenessOption = DurationOption.nonNegative("lateness", lateness)
    val delay = DurationOption.nonNegative("versions_delay", versionsDelay)
    if (keys.isEmpty) OptionError("as_of_join: key: name at least one key column")
    side("readings", readings, keys, readingTime, "reading_time")
    side("versions", versions, keys, versionTime, "version_time")
    keys.foreach { k =>
      val (r, v) = (readings.schema(k).dataType, versions.schema(k).dataType)
      if (r != v) OptionError(
        s"as_of_join: key column '$k' is ${r.simpleString} in readings but ${v.simpleString} in versions; " +
          "cast one side so that both have the same type")
    }
    val versionOutput = versions.schema.fields.zipWithIndex.filterNot { case (f, _) => keys.contains(f.name) }
    (versionOutput.map(_._1.name) :+ StatusColumn).foreach { n =>
      if (readings.schema.fieldNames.contains(n)) OptionError(
        s"as_of_join: column '$n' is in both readings and the output's version columns" +
          (if (n == StatusColumn) " (the join's status column)" else "") + "; rename it on one side")
    }
    KeyedPlanner.requireRocksDb(readings)
    val op = Operator(readings.schema, versions.schema, keys.size, latenessOption.micros,
      versionOutput.map(_._2))
    val keyFields = keys.map(k => readings.schema(k).copy(name = s"kw_k${keys.indexOf(k)}"))
    val readingStruct = readings.schema
    val versionStruct = versions.schema
    def keyCols(df: DataFrame): Seq[Column] = keys.zipWithIndex.map { case (k, i) => df.col(k).as(s"kw_k$i") }
    val readingRows = readings.select(keyCols(readings) ++ Seq(
        F.lit(ReadingSide).as("kw_side"), F.unix_micros(readings.col(readingTime)).as("kw_time"),
        F.struct(readings.columns.toIndexedSeq.map(c => readings.col(c)): _*).as("kw_reading"),
        F.lit(null).cast(versionStruct).as("kw_version")): _*)
    val watermarked = versions.withWatermark(versionTime, delay.text)
    val versionRows = watermarked.select(keyCols(watermarked) ++ Seq(
        F.lit(VersionSide).as("kw_side"), F.unix_micros(watermarked.col(versionTime)).as("kw_time"),
        F.lit(null).cast(readingStruct).as("kw_reading"),
        F.struct(watermarked.columns.toIndexedSeq.map(c => watermarked.col(c)): _*).as("kw_version")): _*)
    val both = readingRows.union(versionRows)
    val keySchema = StructType(keyFields)
    val output = StructType(readings.schema.fields ++
      versionOutput.map(_._1.copy(nullable = true)) :+ StructField(StatusColumn, StringType, nullable = false))
    both.groupBy(keyFields.map(f => F.col(f.name)): _*)
      .as(Encoders.row(keySchema), Encoders.row(both.schema))
      .transformWithState(new AsOfJoinProcessor(op), TimeMode.EventTime(), OutputMode.Append())(
        Encoders.row(output))
      .toDF()
  }

  /** One side's checks: a stream, its key and time columns there, the time a TIMESTAMP, no watermark of its own. */
  private def side(name: String, df: DataFrame, keys: Seq[String], time: String, timeOption: String): Unit = {
    if (!df.isStreaming) OptionError(s"as_of_join: $name must be a streaming DataFrame (readStream)")
    val fields = df.schema.fieldNames
    def missing(c: String, what: String): Nothing = OptionError(
      s"as_of_join: $what '$c' is not a column of $name; its columns: ${fields.mkString(", ")}")
    keys.foreach(k => if (!fields.contains(k)) missing(k, "key column"))
    if (!fields.contains(time)) missing(time, s"$timeOption column")
    val t: DataType = df.schema(time).dataType
    if (t != TimestampType) OptionError(
      s"as_of_join: $timeOption column '$time' of $name is ${t.simpleString}; it must be a TIMESTAMP")
    if (KeyedStages.watermarkUpstream(SparkInternals.analyzedPlan(df))) OptionError(
      s"as_of_join: $name already define Spark's watermark (withWatermark upstream); the join defines it on the " +
        "versions side itself (versions_delay): remove that withWatermark")
  }

}
