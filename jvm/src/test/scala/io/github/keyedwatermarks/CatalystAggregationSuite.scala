package io.github.keyedwatermarks

import org.apache.spark.sql.{Column, Row}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.functions._

import io.github.keyedwatermarks.catalyst.{CatalystAggregation, SparkInternals}
import io.github.keyedwatermarks.catalyst.SparkInternals.RowConverter

/**
 * The aggregation engine against Spark's own groupBy().agg() on the same rows, including a
 * round trip through the stored (serialized) buffer form between partial updates.
 */
class CatalystAggregationSuite extends SparkSuite {
  override protected def runsQueries: Boolean = false

  private def aggregates: Seq[Column] = Seq(
    count(lit(1)).as("n"), count(col("temp")).as("n_temp"), sum("temp").as("s"), avg("temp").as("a"),
    min("temp").as("lo"), max("temp").as("hi"), stddev("temp").as("sd"), variance("temp").as("var"),
    approx_count_distinct("temp").as("acd"), percentile_approx(col("temp"), lit(0.5), lit(10000)).as("p50"),
    sort_array(collect_list("temp")).as("l"), min("label").as("min_label"), max("label").as("max_label"),
    (sum("temp") / count(lit(1))).as("mean_expr"))

  test("declarative and imperative aggregates equal Spark's, across store/merge round trips") {
    val spark2 = spark
    import spark2.implicits._
    val rnd = new scala.util.Random(11)
    val rows = (0 until 400).map { i =>
      (s"d${i % 3}", i.toLong * 1000000L,
        if (i % 17 == 0) null else java.lang.Double.valueOf(math.round(rnd.nextGaussian() * 1000) / 10.0),
        s"l${rnd.nextInt(50)}")
    }
    val df = rows.toDF("device", "us", "temp", "label")
      .select($"device", timestamp_micros($"us").as("ts"), $"temp", $"label")
    val reference = df.groupBy($"device", window($"ts", "1 hour")).agg(aggregates.head, aggregates.tail: _*)
    val expected = reference.collect().map(r => r.getString(0) -> r).toMap

    val agg = CatalystAggregation.fromAnalyzedAggregate(
      SparkInternals.analyzedPlan(reference), SparkInternals.output(df))
    val inputs = new RowConverter(df.schema)
    val stored = new RowConverter(agg.bufferSchema)
    val resultConverter = new RowConverter(reference.schema)

    val compared = df.collect().groupBy(_.getString(0)).map { case (device, deviceRows) =>
      // Fold the rows in three chunks, storing and reloading the buffer in between, as the
      // operator does across micro-batches.
      var storedBuffer: Row = null
      deviceRows.grouped(deviceRows.length / 3 + 1).foreach { chunk =>
        val live = if (storedBuffer == null) agg.newBuffer() else agg.fromStored(stored.toInternal(storedBuffer))
        chunk.foreach(r => agg.update(live, inputs.toInternal(r).copy()))
        storedBuffer = stored.toExternal(agg.toStored(live))
      }
      val window = InternalRow(0L, 3600L * 1000000L)
      val group = InternalRow(org.apache.spark.unsafe.types.UTF8String.fromString(device), window)
      val actual = resultConverter.toExternal(agg.result(group, agg.fromStored(stored.toInternal(storedBuffer))))
      val exp = expected(device)
      reference.schema.fieldNames.indices.drop(2).foreach { i =>
        (actual.get(i), exp.get(i)) match {
          case (a: Double, e: Double) => assert(math.abs(a - e) <= 1e-9 * math.max(1.0, math.abs(e)),
              s"${reference.schema(i).name}: $a != $e")
          case (a, e) => assert(a == e, s"${reference.schema(i).name}: $a != $e")
        }
      }
      device
    }
    // Every device of Spark's result was compared (all 400 rows fall in one hour per device).
    assert(compared.toSet == expected.keySet && expected.size == 3)
  }

  test("rejects DISTINCT aggregates with a clear error") {
    val spark2 = spark
    import spark2.implicits._
    val df = Seq(("a", 1.0)).toDF("device", "temp")
    val reference = df.groupBy($"device").agg(countDistinct("temp"))
    val e = intercept[IllegalArgumentException](CatalystAggregation.fromAnalyzedAggregate(
        SparkInternals.analyzedPlan(reference), SparkInternals.output(df)))
    assert(e.getMessage.matches(
        "^agg: DISTINCT aggregates are not supported yet: count\\(DISTINCT temp\\); use approx_count_distinct$"),
      e.getMessage)
  }
}
