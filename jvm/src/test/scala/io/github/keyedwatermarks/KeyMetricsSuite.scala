package io.github.keyedwatermarks

import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.execution.CollectMetricsExec
import org.apache.spark.sql.functions._

import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.catalyst.{LastAttemptTallies, OnePassMetricsExec}
import io.github.keyedwatermarks.emission.{KeyTally, LagHistogram, OutputMetrics, OutputTally, WindowEmitter}
import io.github.keyedwatermarks.watermark.HeldWatermark

class KeyMetricsSuite extends SparkSuite {
  override protected def runsQueries: Boolean = false

  /** The value of nearest rank ceil(q * n) (at least 1) of `values`, by sorting them all. */
  private def nearestRank(values: Seq[Long], q: Double): Long = {
    val sorted = values.sorted
    sorted(math.max(1, math.ceil(q * sorted.size).toInt) - 1)
  }

  private def lags(seed: Int, n: Int): Seq[Long] = {
    val rnd = new scala.util.Random(seed)
    Seq.fill(n)(rnd.nextInt(4) match {
      case 0 => rnd.nextInt(600).toLong - 100 // around 0: exact buckets, both signs
      case 1 => (rnd.nextGaussian() * 3.6e9).toLong // an hour either way, in microseconds
      case 2 => rnd.nextLong() // anything
      case _ => 5000000L // a crowd at one value
    }) ++ Seq(Long.MaxValue, Long.MinValue + 1, 0L)
  }

  private def histogramOf(values: Seq[Long]): LagHistogram = {
    val h = new LagHistogram
    values.foreach(h.add)
    h
  }

  test("min and max are exact; p50 and p95 are within 1/256 of the value of that rank") {
    for (seed <- 1 to 20) {
      val values = lags(seed, 50 + seed * 37)
      val h = histogramOf(values)
      assert((h.count, h.min, h.max) == ((values.size.toLong, values.min, values.max)))
      for (q <- Seq(0.0, 0.01, 0.5, 0.95, 1.0)) {
        val exact = nearestRank(values, q)
        val got = h.quantile(q)
        assert(got >= values.min && got <= values.max, s"seed=$seed q=$q")
        assert((BigDecimal(got) - BigDecimal(exact)).abs <= BigDecimal(exact).abs / 256, s"seed=$seed q=$q")
        // The same bucket as the exact value: an answer of rank q, not a neighbour's.
        assert(LagHistogram.bucket(got) == LagHistogram.bucket(exact), s"seed=$seed q=$q got=$got exact=$exact")
      }
    }
  }

  test("values below 256 in magnitude are exact") {
    val values = lags(3, 400).filter(v => math.abs(v) < 256)
    val h = histogramOf(values)
    for (q <- Seq(0.1, 0.5, 0.95)) assert(h.quantile(q) == nearestRank(values, q))
  }

  test("merging histograms of parts, through their bytes, equals the histogram of the whole") {
    val values = lags(11, 2000)
    val (a, b) = values.splitAt(777)
    val merged = LagHistogram.fromBytes(histogramOf(a).toBytes)
    merged.merge(LagHistogram.fromBytes(histogramOf(b).toBytes))
    val whole = histogramOf(values)
    assert(merged.toBytes.length == whole.toBytes.length)
    for (q <- Seq(0.0, 0.5, 0.95, 1.0)) assert(merged.quantile(q) == whole.quantile(q))
    assert((merged.count, merged.min, merged.max) == ((whole.count, whole.min, whole.max)))
  }

  /** Keys with lags (`lag(i)` defined) or only watermarks, as the operator adds them. */
  private def tallyOf(watermarks: Seq[Long], lag: Int => Long): KeyTally = {
    val t = new KeyTally
    watermarks.zipWithIndex.foreach { case (wm, i) =>
      t.add(WindowEmitter.HadRows | (if (i % 3 == 0) WindowEmitter.WasNew else 0), i % 4, wm, lag(i), i % 2, StuckAfter)
    }
    t
  }

  private val StuckAfter = 5000000L

  /** The per-key metrics of `df`'s BINARY tallies `t` (as "key" rows), by Spark's own aggregation of the columns. */
  private def keyMetricsOf(df: DataFrame): Row = {
    val rows = df.select(lit(WindowEmitter.KeyKindValue).as("kind"), lit(null).cast("long").as("late"), col("t"))
    val cols = OutputMetrics.columns(rows, "kind", "late", "t", keyMetrics = true)
    rows.agg(cols.head, cols.tail: _*).head()
  }

  test("the per-batch metrics: tallies of several tasks, merged by a Spark aggregate, are those of all keys") {
    val spark2 = spark
    import spark2.implicits._
    val values = lags(5, 3000)
    val watermarks = values.indices.map(i => 1700000000000000L + i * 1000L)
    val parts = values.indices.grouped(700).map(ix => tallyOf(ix.map(watermarks), j => values(ix(j))).toBytes).toSeq
    val df = (parts.map(Option(_)) ++ Seq(None)).toDF("t").repartition(3)
    val got = keyMetricsOf(df)
    val h = histogramOf(values)
    val n = values.size.toLong
    assert(got.getAs[Long]("keys_in_batch") == n)
    assert(got.getAs[Long]("keys_with_data") == n)
    assert(got.getAs[Long]("keys_new") == values.indices.map(i => i % 700).count(_ % 3 == 0))
    assert(got.getAs[Long]("open_windows") == values.indices.map(i => (i % 700) % 4).sum)
    assert(got.getAs[Long]("duplicate_rows") == values.indices.map(i => (i % 700) % 2).sum)
    assert(got.getAs[Double]("watermark_lag_min_s") == values.min / 1e6)
    assert(got.getAs[Double]("watermark_lag_max_s") == values.max / 1e6)
    assert(got.getAs[Double]("watermark_lag_p50_s") == h.quantile(0.5) / 1e6)
    assert(got.getAs[Double]("watermark_lag_p95_s") == h.quantile(0.95) / 1e6)
    assert(got.getAs[Long]("stuck_keys") == values.count(_ > StuckAfter))
  }

  test("without lags: 0 to the highest minus the lowest watermark, no stuck keys; no keys: nulls") {
    val spark2 = spark
    import spark2.implicits._
    val rnd = new scala.util.Random(7)
    val watermarks = Seq.fill(2000)(1700000000000000L + rnd.nextInt(3600) * 1000000L)
    val parts = watermarks.grouped(600).map(w => tallyOf(w, _ => HeldWatermark.Undefined).toBytes).toSeq
    val got = keyMetricsOf(parts.toDF("t").repartition(2))
    val highest = watermarks.max
    assert(got.getAs[Double]("watermark_lag_min_s") == 0.0)
    assert(got.getAs[Double]("watermark_lag_max_s") == (highest - watermarks.min) / 1e6)
    // The lag of rank ceil(q n), within percentile_approx's accuracy (1/10000 of the ranks).
    val sortedLags = watermarks.map(highest - _).sorted
    for ((name, q) <- Seq("watermark_lag_p50_s" -> 0.5, "watermark_lag_p95_s" -> 0.95)) {
      val rank = math.ceil(q * sortedLags.size).toInt
      val window = sortedLags.slice(math.max(0, rank - 2), math.min(sortedLags.size, rank + 1)).map(_ / 1e6)
      assert(got.getAs[Double](name) >= window.min && got.getAs[Double](name) <= window.max, name)
    }
    assert(got.isNullAt(got.fieldIndex("stuck_keys")))
    val empty = keyMetricsOf(Seq(Option.empty[Array[Byte]]).toDF("t"))
    assert(empty.getAs[Long]("keys_in_batch") == 0L)
    for (name <- Seq("watermark_lag_min_s", "watermark_lag_p50_s", "watermark_lag_max_s", "stuck_keys"))
      assert(empty.isNullAt(empty.fieldIndex(name)), name)
  }

  test("the observation in one pass (OnePassMetricsExec) gives the row Spark's aggregation of its columns gives") {
    val spark2 = spark
    import spark2.implicits._
    val rnd = new scala.util.Random(13)
    val kinds = Seq(Contract.Kinds.Window, Contract.Kinds.Watermark, Contract.Kinds.LateRow, WindowEmitter.KeyKindValue)
    val rows = (0 until 600).map { i =>
      val kind = kinds(rnd.nextInt(kinds.size))
      val late = if (rnd.nextInt(3) == 0) None else Some(rnd.nextInt(5).toLong)
      val tally = if (kind != WindowEmitter.KeyKindValue) None
      else Some(tallyOf(
          Seq.fill(1 + rnd.nextInt(20))(1700000000000000L + rnd.nextInt(1000) * 1000L),
          _ => rnd.nextInt(20000000).toLong - 5000000L).toBytes)
      (kind, late, tally)
    }.toDF("kind", "late", "t").repartition(3)
    // onePass = false (a stage planned for real-time mode): Spark's own node, the same row.
    for ((keyMetrics, onePass) <- Seq((true, true), (false, true), (true, false))) {
      val cols = OutputMetrics.columns(rows, "kind", "late", "t", keyMetrics, onePass)
      val observed = rows.observe("kw_test_output", cols.head, cols.tail: _*)
      assert(observed.collect().length == 600)
      // Planned as our one-pass node (the final plan of an adaptive one holds it).
      val plan = CollectMetricsExec.stripAQEPlan(observed.queryExecution.executedPlan)
      assert(plan.collect { case e: OnePassMetricsExec => e }.size == (if (onePass) 1 else 0), plan.treeString)
      val got = observed.queryExecution.observedMetrics("kw_test_output")
      val expected = rows.agg(cols.head, cols.tail: _*).head()
      assert(got.schema == expected.schema)
      assert(got == expected, s"keyMetrics=$keyMetrics")
      assert(got.getAs[Long]("windows_emitted") == rows.where($"kind" === Contract.Kinds.Window).count())
    }
  }

  test("a partition's tally counts once, its last attempt's") {
    def tally(windows: Long): Array[Byte] = { val t = new OutputTally; t.windows = windows; t.toBytes }
    def windows(a: LastAttemptTallies): Long = a.value.map(OutputTally.fromBytes(_).windows).sum
    val a = new LastAttemptTallies
    a.add((0, 0L, tally(5)))
    a.add((1, 0L, tally(7)))
    val retried = new LastAttemptTallies
    retried.add((0, 1L << 32, tally(6))) // partition 0 again, in the stage's second attempt
    retried.add((1, 0L, tally(7)))
    a.merge(retried)
    assert(windows(a) == 13)
    a.add((0, 0L, tally(100))) // a late report of the first attempt does not replace the second's
    assert(windows(a) == 13)
    assert(windows(a.copy()) == 13 && !a.isZero)
    a.reset()
    assert(a.isZero && windows(a) == 0)
  }
}
