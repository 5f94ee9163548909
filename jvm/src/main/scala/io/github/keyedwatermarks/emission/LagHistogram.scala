package io.github.keyedwatermarks.emission

import java.nio.ByteBuffer

import scala.collection.mutable

/**
 * The keys' watermark lags (microseconds) of a task or a micro-batch, for the p50 and p95 of
 * the per-batch metrics ([[KeyTally]]): counts per logarithmic bucket (sign and magnitude;
 * magnitudes below 256 exact, above that 256 buckets per power of two, each less than 0.4%
 * wide), plus the exact min and max. So p50 and p95 are within 0.4% of a lag of that rank
 * (nearest rank, ceil(q * n)).
 *
 * Why not `percentile_approx`: it was the largest part of the metrics' cost with many keys per
 * batch (benchmarks/results/profile.md): Spark's quantile sketch sorts boxed doubles and
 * allocates per value; here a value costs a bucket index and a map update. A lag is bounded by
 * the skew bound plus lateness, so relative error is the right measure.
 */
private[keyedwatermarks] final class LagHistogram {
  import LagHistogram._

  private val counts = mutable.LongMap.empty[Long]
  var count = 0L
  var min = Long.MaxValue
  var max = Long.MinValue

  def add(value: Long): Unit = {
    val v = if (value == Long.MinValue) Long.MinValue + 1 else value // so that -v exists
    addCount(bucket(v), 1L)
    count += 1
    if (v < min) min = v
    if (v > max) max = v
  }

  private def addCount(b: Long, n: Long): Unit = counts.update(b, counts.getOrElse(b, 0L) + n)

  def merge(other: LagHistogram): Unit = {
    other.counts.foreachEntry(addCount)
    count += other.count
    min = math.min(min, other.min)
    max = math.max(max, other.max)
  }

  /**
   * The value of rank ceil(q * count) (at least 1): the lower end of its bucket's magnitude,
   * kept within [min, max] (so it is exact below 256 and never outside the values seen).
   */
  def quantile(q: Double): Long = {
    val rank = math.max(1L, math.ceil(q * count).toLong)
    val buckets = counts.keys.toArray
    java.util.Arrays.sort(buckets)
    var seen = 0L
    var i = 0
    while (i < buckets.length) {
      seen += counts(buckets(i))
      if (seen >= rank) return math.min(max, math.max(min, lowerEnd(buckets(i))))
      i += 1
    }
    max
  }

  def toBytes: Array[Byte] = {
    val out = ByteBuffer.allocate(8 * (3 + 2 * counts.size))
    out.putLong(count).putLong(min).putLong(max)
    counts.foreachEntry((b, n) => out.putLong(b).putLong(n))
    out.array()
  }
}

private[keyedwatermarks] object LagHistogram {
  private val SubBits = 8
  private val Sub = 1L << SubBits

  /** The bucket of `v` (not Long.MinValue); buckets are ordered as the values. */
  def bucket(v: Long): Long = if (v < 0) -magnitudeBucket(-v) - 1 else magnitudeBucket(v)

  /** A value of the bucket: its magnitudes' lower end, with the bucket's sign. */
  def lowerEnd(b: Long): Long = if (b < 0) -magnitudeLowerEnd(-b - 1) else magnitudeLowerEnd(b)

  // Below Sub: the value itself. Above: the top SubBits + 1 bits (top in [Sub, 2 Sub)) and how
  // far they were shifted, so bucket (shift + 1) * Sub + (top - Sub) continues the exact range.
  private def magnitudeBucket(v: Long): Long =
    if (v < Sub) v
    else {
      val shift = 63 - java.lang.Long.numberOfLeadingZeros(v) - SubBits
      val top = v >>> shift
      (shift + 1) * Sub + (top - Sub)
    }

  private def magnitudeLowerEnd(b: Long): Long =
    if (b < Sub) b
    else {
      val shift = b / Sub - 1
      val top = b % Sub + Sub
      top << shift
    }

  def fromBytes(bytes: Array[Byte]): LagHistogram = {
    val in = ByteBuffer.wrap(bytes)
    val h = new LagHistogram
    h.count = in.getLong()
    h.min = in.getLong()
    h.max = in.getLong()
    while (in.hasRemaining) h.addCount(in.getLong(), in.getLong())
    h
  }
}
