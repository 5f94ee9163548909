package io.github.keyedwatermarks.emission

import java.nio.ByteBuffer
import java.util.concurrent.ConcurrentHashMap

import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.aggregate.ApproximatePercentile
import org.apache.spark.sql.catalyst.expressions.aggregate.ApproximatePercentile.PercentileDigest
import org.apache.spark.sql.types.{DoubleType, LongType, StructType}

import io.github.keyedwatermarks.watermark.HeldWatermark

/**
 * The per-key metrics of one task (or, merged, of one micro-batch): what [[OutputMetrics]]
 * reports, summed over the keys the operator handled, one [[add]] per key.
 *
 * Why a tally and not a row per key: a row per key went through an encoder, the output's
 * projection and 14 aggregates of `observe()` (Spark's CollectMetricsExec is interpreted), and
 * cost ours about a fifth of its throughput with 100k keys per batch
 * (benchmarks/results/regression-bisect.md). The operator now adds each key to its task's
 * tally (a few counters and a histogram bucket) and [[KeyTallyRelayExec]] emits the tally as
 * one row after the task's last output row, which `observe()` merges ([[OutputMetric]]).
 *
 * Lags (Spark's global watermark minus the key's, microseconds) go into a [[LagHistogram]]
 * (exact min and max, p50 and p95 within 0.4%). Keys with a watermark but no lag (no global
 * watermark) go into Spark's own `percentile_approx` digest (accuracy 10000) as minus their
 * watermark: those are epoch-sized values, for which the histogram's relative error would be
 * hours, while the digest's error is in ranks.
 */
private[keyedwatermarks] final class KeyTally {
  import KeyTally._

  var keys = 0L
  var withData = 0L
  var fresh = 0L
  var released = 0L
  var openWindows = 0L
  var duplicates = 0L
  var stuck = 0L
  val lags = new LagHistogram
  var watermarks = 0L
  var highest = Long.MinValue
  var lowest = Long.MaxValue
  private var unlagged: PercentileDigest = _
  private var unlaggedCount = 0L

  /** One key after a call of the operator: see WindowEmitter's flags; Undefined for no watermark or lag. */
  def add(flags: Int, windows: Int, watermark: Long, lag: Long, duplicateRows: Long, stuckAfterMicros: Long): Unit = {
    keys += 1
    if ((flags & WindowEmitter.HadRows) != 0) withData += 1
    if ((flags & WindowEmitter.WasNew) != 0) fresh += 1
    if ((flags & WindowEmitter.Released) != 0) released += 1
    openWindows += windows
    duplicates += duplicateRows
    if (watermark != HeldWatermark.Undefined) {
      watermarks += 1
      if (watermark > highest) highest = watermark
      if (watermark < lowest) lowest = watermark
      if (lag != HeldWatermark.Undefined) {
        lags.add(lag)
        if (lag > stuckAfterMicros) stuck += 1
      } else {
        if (unlagged == null) unlagged = new PercentileDigest(RelativeError)
        unlagged.add(-watermark.toDouble)
        unlaggedCount += 1
      }
    }
  }

  def merge(other: KeyTally): Unit = {
    keys += other.keys
    withData += other.withData
    fresh += other.fresh
    released += other.released
    openWindows += other.openWindows
    duplicates += other.duplicates
    stuck += other.stuck
    if (other.lags.count > 0) lags.merge(other.lags)
    watermarks += other.watermarks
    highest = math.max(highest, other.highest)
    lowest = math.min(lowest, other.lowest)
    if (other.unlaggedCount > 0) {
      if (unlagged == null) unlagged = new PercentileDigest(RelativeError)
      unlagged.merge(other.unlagged)
      unlaggedCount += other.unlaggedCount
    }
  }

  /**
   * The metrics ([[MetricsSchema]]). With lags: min and max exact, p50 and p95 from the
   * histogram, stuck keys counted. Without (no global watermark): a key's lag is the highest
   * watermark minus its own, so the min is 0, the max the highest minus the lowest watermark,
   * the q quantile the highest watermark plus the q quantile of minus the watermarks; no stuck
   * keys (null).
   */
  def metrics: InternalRow = {
    val hasLag = lags.count > 0
    def seconds(micros: Long): Any = micros / 1e6
    def quantile(q: Double): Any =
      if (hasLag) seconds(lags.quantile(q))
      else if (unlaggedCount > 0) seconds(unlagged.getPercentiles(Array(q)).head.toLong + highest)
      else null
    InternalRow(keys, withData, fresh, released, openWindows, duplicates,
      if (hasLag) seconds(lags.min) else if (watermarks > 0) 0.0 else null,
      quantile(0.5),
      quantile(0.95),
      if (hasLag) seconds(lags.max) else if (watermarks > 0) seconds(highest - lowest) else null,
      if (hasLag) stuck else null)
  }

  def toBytes: Array[Byte] = {
    val histogram = lags.toBytes
    val digest = if (unlaggedCount > 0) ApproximatePercentile.serializer.serialize(unlagged) else Array.emptyByteArray
    val out = ByteBuffer.allocate(8 * 12 + 8 + histogram.length + digest.length)
    out.putLong(keys).putLong(withData).putLong(fresh).putLong(released).putLong(openWindows).putLong(duplicates)
      .putLong(stuck).putLong(watermarks).putLong(highest).putLong(lowest).putLong(unlaggedCount)
      .putInt(histogram.length).put(histogram).putInt(digest.length).put(digest)
    out.array().take(out.position())
  }
}

private[keyedwatermarks] object KeyTally {
  /** percentile_approx's default accuracy (10000), as its relative error. */
  private val RelativeError = 1.0 / 10000

  /** The metrics, in this order, as `observedMetrics["keyed_watermarks_output"]` has them. */
  val MetricsSchema: StructType = new StructType()
    .add("keys_in_batch", LongType, nullable = false)
    .add("keys_with_data", LongType, nullable = false)
    .add("keys_new", LongType, nullable = false)
    .add("keys_released", LongType, nullable = false)
    .add("open_windows", LongType, nullable = false)
    .add("duplicate_rows", LongType, nullable = false)
    .add("watermark_lag_min_s", DoubleType, nullable = true)
    .add("watermark_lag_p50_s", DoubleType, nullable = true)
    .add("watermark_lag_p95_s", DoubleType, nullable = true)
    .add("watermark_lag_max_s", DoubleType, nullable = true)
    .add("stuck_keys", LongType, nullable = true)

  def fromBytes(bytes: Array[Byte]): KeyTally = {
    val in = ByteBuffer.wrap(bytes)
    val t = new KeyTally
    t.keys = in.getLong()
    t.withData = in.getLong()
    t.fresh = in.getLong()
    t.released = in.getLong()
    t.openWindows = in.getLong()
    t.duplicates = in.getLong()
    t.stuck = in.getLong()
    t.watermarks = in.getLong()
    t.highest = in.getLong()
    t.lowest = in.getLong()
    t.unlaggedCount = in.getLong()
    val histogram = new Array[Byte](in.getInt())
    in.get(histogram)
    t.lags.merge(LagHistogram.fromBytes(histogram))
    val digest = new Array[Byte](in.getInt())
    in.get(digest)
    if (t.unlaggedCount > 0) t.unlagged = ApproximatePercentile.serializer.deserialize(digest)
    t
  }

  // The tallies of running tasks, by (task attempt, operator): the operator opens its task's
  // tally when it starts a partition, KeyTallyRelayExec takes it after the last output row.
  // Both run in the task's thread, one after the other (the relay pulls the operator's rows).
  private val open = new ConcurrentHashMap[(Long, String), KeyTally]()

  /** A new tally for this task and operator `id` (outside a task: one no relay takes). */
  def openForTask(id: String): KeyTally = {
    val tally = new KeyTally
    val task = TaskContext.get()
    if (task != null) {
      val key = (task.taskAttemptId(), id)
      open.put(key, tally)
      // A task that fails or stops early leaves nothing behind.
      task.addTaskCompletionListener[Unit](_ => open.remove(key))
    }
    tally
  }

  /** This task's tally of operator `id`, once, or None if the operator did not open one. */
  def takeForTask(id: String): Option[KeyTally] =
    Option(TaskContext.get()).flatMap(task => Option(open.remove((task.taskAttemptId(), id))))
}
