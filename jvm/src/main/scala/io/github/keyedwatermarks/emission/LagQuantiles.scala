package io.github.keyedwatermarks.emission

import java.nio.ByteBuffer

import scala.collection.mutable

import org.apache.spark.sql.Column
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.expressions.aggregate.TypedImperativeAggregate
import org.apache.spark.sql.catalyst.trees.UnaryLike
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{ArrayType, DataType, LongType}

/**
 * The min, p50, p95 and max of the keys' watermark lags (microseconds) for the per-batch
 * metrics: `array<bigint>` of those four, null when no row has a lag.
 *
 * Why not `percentile_approx`: it was the largest part of the metrics' cost with many keys
 * per batch (benchmarks/results/profile.md): Spark's quantile sketch sorts boxed doubles and
 * allocates per value. Here a value costs a bucket index and a map
 * update. The buckets are logarithmic (256 per power of two: [[LagHistogram]]), so p50 and
 * p95 are within 0.4% of a lag of that rank (nearest rank, ceil(q * n)); min and max are exact.
 * A lag is bounded by the skew bound plus lateness, so relative error is the right measure;
 * the fallback without a global watermark (minus the watermarks: epoch-sized values) stays on
 * `percentile_approx` (see [[KeyMetrics]]).
 */
private[keyedwatermarks] final case class LagQuantiles(
    child: Expression, mutableAggBufferOffset: Int = 0, inputAggBufferOffset: Int = 0)
    extends TypedImperativeAggregate[LagHistogram] with UnaryLike[Expression] {

  override def dataType: DataType = ArrayType(LongType, containsNull = false)
  override def nullable: Boolean = true
  override def prettyName: String = "kw_lag_quantiles"

  override def createAggregationBuffer(): LagHistogram = new LagHistogram

  override def update(buffer: LagHistogram, input: InternalRow): LagHistogram = {
    val v = child.eval(input)
    if (v != null) buffer.add(v.asInstanceOf[Long])
    buffer
  }

  override def merge(buffer: LagHistogram, other: LagHistogram): LagHistogram = { buffer.merge(other); buffer }

  override def eval(buffer: LagHistogram): Any =
    if (buffer.count == 0) null
    else new GenericArrayData(Array[Any](buffer.min, buffer.quantile(0.5), buffer.quantile(0.95), buffer.max))

  override def serialize(buffer: LagHistogram): Array[Byte] = buffer.toBytes
  override def deserialize(bytes: Array[Byte]): LagHistogram = LagHistogram.fromBytes(bytes)

  override def withNewMutableAggBufferOffset(offset: Int): LagQuantiles = copy(mutableAggBufferOffset = offset)
  override def withNewInputAggBufferOffset(offset: Int): LagQuantiles = copy(inputAggBufferOffset = offset)
  override protected def withNewChildInternal(newChild: Expression): LagQuantiles = copy(child = newChild)
}

private[keyedwatermarks] object LagQuantiles {
  /** [min, p50, p95, max] of a BIGINT column (nulls skipped), null when it has no value. */
  def apply(column: Column): Column = SparkBridge.column(LagQuantiles(SparkBridge.expression(column)))
}

/**
 * Counts per logarithmic bucket (sign and magnitude; magnitudes below 256 exact, above that
 * 256 buckets per power of two, each less than 0.4% wide), plus the exact min and max.
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
