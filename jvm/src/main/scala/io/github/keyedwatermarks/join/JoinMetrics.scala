package io.github.keyedwatermarks.join

import java.nio.ByteBuffer

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.expressions.aggregate.{ApproximatePercentile, TypedImperativeAggregate}
import org.apache.spark.sql.catalyst.expressions.aggregate.ApproximatePercentile.PercentileDigest
import org.apache.spark.sql.catalyst.trees.UnaryLike
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{BooleanType, DataType, DoubleType, LongType, StructField, StructType}

import io.github.keyedwatermarks.catalyst.{SparkInternals, TallyField}
import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.planner.KeyedStages

/**
 * The per-batch metrics of a per-key join (docs/joins.md, "Metrics"), as observed metrics
 * (`query.lastProgress.observedMetrics`) named `keyed_watermarks_join`, or
 * `keyed_watermarks_join.<name>` for a named join (two joins of one query need two names):
 *  - `<status>_rows`: the output rows of each status (`joined_rows`, `late_rows`, ...);
 *  - `keys_in_batch`: the keys the operator handled (with rows, or by a timer);
 *  - `held_rows_max`: the most rows any of those keys holds in the join's state after the batch;
 *  - `watermark_lag_{min,p50,p95,max}_s`: how far those keys' watermarks trail the highest of
 *    them, in seconds, as the window stage's lags without a global watermark (so the min is 0);
 *    Spark's `percentile_approx` (accuracy 10000) gives p50 and p95, min and max are exact.
 *
 * The operator ends each call with a metrics row (status [[KeyStatus]], the join's columns null,
 * [[KeyColumn]] set: [[keySchema]]), which carries the call's counts of rows per status, so the
 * observation reads only those rows' fields, not every output row's status, in one pass over
 * the rows ([[JoinMetric]]); it is then dropped.
 * The operator's output is therefore nullable everywhere, and the join's own nullability is
 * restored after.
 */
private[keyedwatermarks] object JoinMetrics {
  val Base: String = Contract.JoinMetrics
  val KeyColumn = "kw_join_key"
  val KeyStatus = "kw_key"

  /**
   * The metrics row's fields: whether the call had a key (not a null one), the rows the key
   * holds, its watermark in microseconds (null before it has one), the call's rows per status.
   */
  def keySchema(statuses: Seq[String]): StructType = StructType(Seq(
    StructField("key", BooleanType, nullable = false), StructField("held_rows", LongType, nullable = false),
    StructField("watermark", LongType, nullable = true)) ++
    statuses.map(s => StructField(s"${s}_rows", LongType, nullable = false)))

  /** The operator's output schema: the join's columns, all nullable (for the metrics rows), then [[KeyColumn]]. */
  def operatorSchema(join: StructType, statuses: Seq[String]): StructType =
    StructType(join.fields.map(_.copy(nullable = true)) :+ StructField(KeyColumn, keySchema(statuses), nullable = true))

  /**
   * The join's metrics name: "" (the plain name) for a query's first join, else `name` or the
   * key columns joined with "_"; a name a join upstream (on either side) has already is refused.
   */
  def name(chosen: Option[String], keys: Seq[String], both: DataFrame): String =
    KeyedStages.stageName(chosen, keys, SparkInternals.analyzedPlan(both), Base, "join")

  /** The observed columns' names, in order: each status's rows, then the key metrics. */
  def columnNames(statuses: Seq[String]): Seq[String] = statuses.map(s => s"${s}_rows") ++ Seq(
    "keys_in_batch", "held_rows_max", "watermark_lag_min_s", "watermark_lag_p50_s", "watermark_lag_p95_s",
    "watermark_lag_max_s")

  /**
   * The join's rows (`join`: its schema) from the operator's `out`, observed: `statuses` are the
   * join's output statuses, each counted; the key rows feed the key metrics and are dropped.
   * Every column is a [[JoinMetric]] of the metrics rows, so the observation is one pass
   * (`catalyst.OnePassMetricsExec`).
   */
  def observed(out: DataFrame, name: String, statuses: Seq[String], join: StructType): DataFrame = {
    val key = SparkBridge.expression(out.col(KeyColumn))
    val cols = columnNames(statuses).zipWithIndex.map { case (column, field) =>
      SparkBridge.column(JoinMetric(field, key, statuses)).as(column)
    }
    val withMetrics = out.observe(KeyedStages.metricsName(Base, name), cols.head, cols.tail: _*)
    SparkInternals.withNullability(withMetrics.where(withMetrics.col(KeyColumn).isNull), join)
  }
}

/**
 * What a join's metrics rows add up to in a micro-batch: the rows per status, the keys, the most
 * rows a key holds, and the keys' watermarks (microseconds): their highest, lowest and Spark's
 * `percentile_approx` digest of them (accuracy 10000), as `percentile_approx(watermark, q, 10000)`
 * would build it.
 */
private[keyedwatermarks] final class JoinTally(statuses: Int) {
  val rows = new Array[Long](statuses)
  var keys = 0L
  var heldMax = 0L
  var watermarks = 0L
  var highest = Long.MinValue
  var lowest = Long.MaxValue
  var digest = new PercentileDigest(1.0 / 10000)

  def merge(other: JoinTally): Unit = {
    for (i <- rows.indices) rows(i) += other.rows(i)
    keys += other.keys
    heldMax = math.max(heldMax, other.heldMax)
    watermarks += other.watermarks
    highest = math.max(highest, other.highest)
    lowest = math.min(lowest, other.lowest)
    digest.merge(other.digest)
  }

  /** Column `field` of [[JoinMetrics.columnNames]]; the lags null without a watermark. */
  def metric(field: Int): Any = {
    def lag(q: Double): Any = // highest minus the (1 - q)-quantile, as percentile_approx gives it (a LONG)
      (highest - digest.getPercentiles(Array(1 - q)).head.toLong) / 1e6
    field - rows.length match {
      case f if f < 0 => rows(field)
      case 0 => keys
      case 1 => heldMax
      case _ if watermarks == 0 => null
      case 2 => 0.0
      case 3 => lag(0.5)
      case 4 => lag(0.95)
      case _ => (highest - lowest) / 1e6
    }
  }

  def toBytes: Array[Byte] = {
    val d = ApproximatePercentile.serializer.serialize(digest)
    val out = ByteBuffer.allocate(8 * (rows.length + 5) + d.length)
    rows.foreach(out.putLong)
    out.putLong(keys).putLong(heldMax).putLong(watermarks).putLong(highest).putLong(lowest).put(d)
    out.array()
  }
}

private[keyedwatermarks] object JoinTally {
  def fromBytes(statuses: Int, bytes: Array[Byte]): JoinTally = {
    val in = ByteBuffer.wrap(bytes)
    val t = new JoinTally(statuses)
    for (i <- t.rows.indices) t.rows(i) = in.getLong()
    t.keys = in.getLong()
    t.heldMax = in.getLong()
    t.watermarks = in.getLong()
    t.highest = in.getLong()
    t.lowest = in.getLong()
    t.digest =
      ApproximatePercentile.serializer.deserialize(java.util.Arrays.copyOfRange(bytes, in.position(), bytes.length))
    t
  }
}

/** Column `field` of a join's metrics ([[JoinMetrics.columnNames]]) over its metrics rows' `key` struct. */
private[keyedwatermarks] final case class JoinMetric(
    field: Int, key: Expression, statuses: Seq[String], mutableAggBufferOffset: Int = 0, inputAggBufferOffset: Int = 0)
    extends TypedImperativeAggregate[JoinTally] with UnaryLike[Expression] with TallyField {

  override def child: Expression = key
  // The joins have no real-time mode (their stages are planned for micro-batches only).
  override def onePass: Boolean = true
  override def dataType: DataType = if (field < statuses.length + 2) LongType else DoubleType
  override def nullable: Boolean = field >= statuses.length + 2
  override def prettyName: String = "kw_join_metric"

  override def createAggregationBuffer(): JoinTally = new JoinTally(statuses.length)

  override def update(buffer: JoinTally, input: InternalRow): JoinTally = {
    val k = key.eval(input).asInstanceOf[InternalRow]
    if (k != null) { // a metrics row ([[JoinMetrics.keySchema]]), not an output row
      if (k.getBoolean(0)) buffer.keys += 1
      buffer.heldMax = math.max(buffer.heldMax, k.getLong(1))
      if (!k.isNullAt(2)) {
        val w = k.getLong(2)
        buffer.watermarks += 1
        buffer.highest = math.max(buffer.highest, w)
        buffer.lowest = math.min(buffer.lowest, w)
        buffer.digest.add(w.toDouble)
      }
      for (i <- buffer.rows.indices) buffer.rows(i) += k.getLong(3 + i)
    }
    buffer
  }

  override def merge(buffer: JoinTally, other: JoinTally): JoinTally = { buffer.merge(other); buffer }
  override def eval(buffer: JoinTally): Any = buffer.metric(field)
  override def serialize(buffer: JoinTally): Array[Byte] = buffer.toBytes
  override def deserialize(bytes: Array[Byte]): JoinTally = JoinTally.fromBytes(statuses.length, bytes)

  override def withNewMutableAggBufferOffset(offset: Int): JoinMetric = copy(mutableAggBufferOffset = offset)
  override def withNewInputAggBufferOffset(offset: Int): JoinMetric = copy(inputAggBufferOffset = offset)
  override protected def withNewChildInternal(newChild: Expression): JoinMetric = copy(key = newChild)
}
