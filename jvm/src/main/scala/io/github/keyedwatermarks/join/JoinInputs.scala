package io.github.keyedwatermarks.join

import org.apache.spark.sql.{Column, DataFrame, functions => F}
import org.apache.spark.sql.types.{DataType, LongType, StructField, StructType, TimestampType}

import io.github.keyedwatermarks.catalyst.SparkInternals
import io.github.keyedwatermarks.planner.KeyedStages
import io.github.keyedwatermarks.spec.OptionError

/**
 * What both per-key joins share before their operator: the checks of their two inputs (before
 * any query starts, naming the function, the side and the column) and the one stream the
 * operator reads, the union of both sides grouped by key. Each side's row becomes
 * `kw_k0..kw_kN` (the keys), `kw_side` (0 the first side, 1 the second), `kw_time`
 * (microseconds), `kw_first` and `kw_second` (the side's columns as a struct; the other side's
 * struct is null). `transformWithState` takes one input, so two streams meet in a union.
 */
private[keyedwatermarks] object JoinInputs {
  val FirstSide = 0
  val SecondSide = 1
  val StatusColumn = "join_status"

  /** The operator's input ordinals, after the `keyCount` key columns. */
  final case class Layout(keyCount: Int) {
    val sideOrdinal: Int = keyCount
    val timeOrdinal: Int = keyCount + 1
    val firstOrdinal: Int = keyCount + 2
    val secondOrdinal: Int = keyCount + 3
  }

  /** One side: a stream, its key and time columns there, the time a TIMESTAMP. */
  final case class Side(name: String, df: DataFrame, time: String, timeOption: String)

  /**
   * Both sides' checks: each a stream with the keys and its time column (a TIMESTAMP); the keys
   * of the same types on both; optionally (`watermarkRefused`, the reason) no `withWatermark`
   * upstream of either.
   */
  def check(fn: String, keys: Seq[String], first: Side, second: Side, watermarkRefused: Option[String]): Unit = {
    if (keys.isEmpty) OptionError(s"$fn: key: name at least one key column")
    Seq(first, second).foreach(checkSide(fn, keys, _, watermarkRefused))
    keys.foreach { k =>
      val (a, b) = (first.df.schema(k).dataType, second.df.schema(k).dataType)
      if (a != b) OptionError(
        s"$fn: key column '$k' is ${a.simpleString} in ${first.name} but ${b.simpleString} in ${second.name}; " +
          "cast one side so that both have the same type")
    }
  }

  /** The second side's fields in the output: all but the keys (with their ordinals there). */
  def secondOutput(keys: Seq[String], second: DataFrame): Array[(StructField, Int)] =
    second.schema.fields.zipWithIndex.filterNot { case (f, _) => keys.contains(f.name) }

  /** Refuses a second-side output column (or the status column) that the first side has too. */
  def refuseClashes(fn: String, first: DataFrame, secondNames: Seq[String], secondWhat: String): Unit =
    (secondNames :+ StatusColumn).foreach { n =>
      if (first.schema.fieldNames.contains(n)) OptionError(
        s"$fn: column '$n' is in both ${secondWhat}" +
          (if (n == StatusColumn) " (the join's status column)" else "") + "; rename it on one side")
    }

  /** The union of both sides (already checked), in the layout above, and its key schema. */
  def union(keys: Seq[String], first: Side, second: Side): (DataFrame, StructType) = {
    val keyFields = keys.zipWithIndex.map { case (k, i) => first.df.schema(k).copy(name = s"kw_k$i") }
    def rows(s: Side, sideId: Int): DataFrame = {
      def struct(d: DataFrame): Column = F.struct(d.columns.toIndexedSeq.map(c => d.col(c)): _*)
      val own = struct(s.df)
      val (firstCol, secondCol) =
        if (sideId == FirstSide) (own, F.lit(null).cast(second.df.schema))
        else (F.lit(null).cast(first.df.schema), own)
      s.df.select(keys.zipWithIndex.map { case (k, i) => s.df.col(k).as(s"kw_k$i") } ++ Seq(
          F.lit(sideId).as("kw_side"), F.unix_micros(s.df.col(s.time)).as("kw_time"),
          firstCol.as("kw_first"), secondCol.as("kw_second")): _*)
    }
    (rows(first, FirstSide).union(rows(second, SecondSide)), StructType(keyFields))
  }

  /**
   * A side's row as the joins' state stores it: under positional field names (`c0`, `c1`, ...),
   * Avro-safe whatever the user's column names.
   */
  def stored(schema: StructType): StructType =
    StructType(schema.fields.zipWithIndex.map { case (f, i) => f.copy(name = s"c$i") })

  /** A stored row after its time in microseconds. */
  def timed(schema: StructType): StructType = StructType(Seq(
      StructField("time", LongType, nullable = false), StructField("row", stored(schema), nullable = false)))

  private def checkSide(fn: String, keys: Seq[String], s: Side, watermarkRefused: Option[String]): Unit = {
    if (!s.df.isStreaming) OptionError(s"$fn: ${s.name} must be a streaming DataFrame (readStream)")
    val fields = s.df.schema.fieldNames
    def missing(c: String, what: String): Nothing = OptionError(
      s"$fn: $what '$c' is not a column of ${s.name}; its columns: ${fields.mkString(", ")}")
    keys.foreach(k => if (!fields.contains(k)) missing(k, "key column"))
    if (!fields.contains(s.time)) missing(s.time, s"${s.timeOption} column")
    val t: DataType = s.df.schema(s.time).dataType
    if (t != TimestampType) OptionError(
      s"$fn: ${s.timeOption} column '${s.time}' of ${s.name} is ${t.simpleString}; it must be a TIMESTAMP")
    watermarkRefused.foreach { why =>
      if (KeyedStages.watermarkUpstream(SparkInternals.analyzedPlan(s.df))) OptionError(
        s"$fn: ${s.name} already define Spark's watermark (withWatermark upstream); $why: remove that withWatermark")
    }
  }
}
