package io.github.keyedwatermarks

import org.apache.spark.sql.functions._

import io.github.keyedwatermarks.emission.{LagHistogram, LagQuantiles}

class LagQuantilesSuite extends SparkSuite {

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

  test("as a Spark aggregate over several partitions: [min, p50, p95, max], nulls skipped, null when empty") {
    val spark2 = spark
    import spark2.implicits._
    val values = lags(5, 3000)
    val df = (values.map(Option(_)) ++ Seq(None, None)).toDF("lag").repartition(4)
    val got = df.agg(LagQuantiles(col("lag"))).as[Seq[Long]].head()
    val h = histogramOf(values)
    assert(got == Seq(values.min, h.quantile(0.5), h.quantile(0.95), values.max))
    assert((BigDecimal(got(1)) - BigDecimal(nearestRank(values, 0.5))).abs <=
      BigDecimal(nearestRank(values, 0.5)).abs / 256)
    val empty = df.where(col("lag").isNull).agg(LagQuantiles(col("lag")).as("q")).head()
    assert(empty.isNullAt(0))
  }
}
