package io.github.keyedwatermarks.catalyst

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.util.QuantileSummaries
import org.apache.spark.sql.types.{ArrayType, DoubleType, LongType, StructField, StructType}

/**
 * A bounded quantile sketch: Spark's own `QuantileSummaries` (Greenwald-Khanna, the sketch
 * behind `percentile_approx` and `approxQuantile`), stored in the state store as plain arrays.
 * Its size is O(1/relativeError * log(relativeError * count)) samples, whatever the count.
 */
private[keyedwatermarks] final class QuantileSketch private (private var summaries: QuantileSummaries) {

  def insert(value: Double): Unit = summaries = summaries.insert(value)

  /**
   * The `q`-quantile by nearest rank (the value of rank ceil(q * count)): the first sample
   * whose minimum rank reaches it. Exact while the sketch has not merged samples (fewer than
   * 1 / (2 * relativeError) values); otherwise within 2 * relativeError * count ranks. (Spark's
   * own `query` widens its search by the error bound even while exact, which made small
   * samples answer one rank off.)
   */
  def quantile(q: Double): Option[Double] = {
    compress()
    val sampled = summaries.sampled
    if (sampled.isEmpty) return None
    val rank = math.max(1L, math.ceil(q * summaries.count).toLong)
    var minRank = 0L
    var i = 0
    while (i < sampled.length) {
      minRank += sampled(i).g
      if (minRank >= rank) return Some(sampled(i).value)
      i += 1
    }
    Some(sampled.last.value)
  }

  private def compress(): Unit = if (!summaries.compressed) summaries = summaries.compress()

  def toRow: Row = {
    compress()
    val s = summaries.sampled
    Row(summaries.count, s.map(_.value).toSeq, s.map(_.g).toSeq, s.map(_.delta).toSeq)
  }
}

private[keyedwatermarks] object QuantileSketch {
  val Schema: StructType = StructType(Seq(
      StructField("sketch_count", LongType, nullable = false),
      StructField("sketch_values", ArrayType(DoubleType, containsNull = false), nullable = false),
      StructField("sketch_g", ArrayType(LongType, containsNull = false), nullable = false),
      StructField("sketch_delta", ArrayType(LongType, containsNull = false), nullable = false)))

  def empty(relativeError: Double): QuantileSketch =
    new QuantileSketch(new QuantileSummaries(QuantileSummaries.defaultCompressThreshold, relativeError,
        Array.empty, 0L, true))

  def fromRow(row: Row, relativeError: Double): QuantileSketch = {
    val values = row.getSeq[Double](1)
    val g = row.getSeq[Long](2)
    val delta = row.getSeq[Long](3)
    val sampled = values.indices.map(i => new QuantileSummaries.Stats(values(i), g(i), delta(i))).toArray
    new QuantileSketch(new QuantileSummaries(QuantileSummaries.defaultCompressThreshold, relativeError,
        sampled, row.getLong(0), true))
  }
}
