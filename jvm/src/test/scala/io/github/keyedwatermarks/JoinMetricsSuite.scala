package io.github.keyedwatermarks

import org.apache.spark.sql.{functions => F, Row}
import org.apache.spark.sql.execution.CollectMetricsExec
import org.apache.spark.sql.types.{LongType, StructType}

import io.github.keyedwatermarks.catalyst.OnePassMetricsExec
import io.github.keyedwatermarks.join.JoinMetrics

class JoinMetricsSuite extends SparkSuite {
  override protected def runsQueries: Boolean = false

  private val Statuses = Seq("joined", "late")

  test("a join's metrics in one pass equal Spark's own aggregates of the metrics rows") {
    val rnd = new scala.util.Random(43)
    val keySchema = JoinMetrics.keySchema(Statuses)
    val schema = new StructType().add("v", LongType).add(JoinMetrics.KeyColumn, keySchema)
    // Output rows (no metrics row) and metrics rows: a key or a null key's call, held rows, a
    // watermark or none yet, the call's rows per status.
    val rows = (0 until 800).map { i =>
      if (i % 3 == 0) Row(i.toLong, null)
      else Row(null,
        Row(rnd.nextInt(5) != 0, rnd.nextInt(40).toLong,
          if (rnd.nextInt(6) == 0) null else 1700000000000000L + rnd.nextInt(600) * 1000000L,
          rnd.nextInt(9).toLong, rnd.nextInt(2).toLong))
    }
    val all = spark.createDataFrame(spark.sparkContext.parallelize(rows, 3), schema)
    for (input <- Seq(all, all.where(F.col(JoinMetrics.KeyColumn).isNull))) { // and with no metrics row
      val observed = JoinMetrics.observed(input, "", Statuses, new StructType().add("v", LongType))
      observed.collect()
      val plan = CollectMetricsExec.stripAQEPlan(observed.queryExecution.executedPlan)
      assert(plan.collect { case e: OnePassMetricsExec => e }.size == 1, plan.treeString)
      val got = observed.queryExecution.observedMetrics(JoinMetrics.Base)

      // The oracle: the same metrics as Spark's own aggregate functions.
      val key = input.col(JoinMetrics.KeyColumn)
      val watermark = key.getField("watermark")
      val highest = F.max(watermark)
      def lag(q: Double) = (highest - F.percentile_approx(watermark, F.lit(1 - q), F.lit(10000))) / 1e6
      val expected = input.agg(
        F.coalesce(F.sum(key.getField("joined_rows")), F.lit(0L)),
        F.coalesce(F.sum(key.getField("late_rows")), F.lit(0L)),
        F.count(F.when(key.getField("key"), 1)),
        F.coalesce(F.max(key.getField("held_rows")), F.lit(0L)),
        (highest - highest) / 1e6, lag(0.5), lag(0.95), (highest - F.min(watermark)) / 1e6).head()
      assert(got.schema.fieldNames.toSeq == JoinMetrics.columnNames(Statuses))
      assert(got.toSeq == expected.toSeq)
      assert(got.schema.map(_.nullable) == Seq(false, false, false, false, true, true, true, true))
    }
  }
}
