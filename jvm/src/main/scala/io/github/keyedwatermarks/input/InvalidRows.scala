package io.github.keyedwatermarks.input

import java.nio.ByteBuffer

import org.apache.spark.sql.{Column, DataFrame, functions => F}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.expressions.aggregate.TypedImperativeAggregate
import org.apache.spark.sql.catalyst.trees.BinaryLike
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{DataType, LongType}

import io.github.keyedwatermarks.catalyst.TallyField

/**
 * Rows that can never be aggregated (null key, null event time, null source, a session gap
 * that ends before the row starts, an unparsable or negative per-key lateness, an event time
 * further ahead of processing time than `max_ahead`), and the per-batch input counts in
 * `query.lastProgress.observedMetrics["keyed_watermarks_input"]`.
 *
 * Why not `observe()` the input rows: Spark's CollectMetricsExec is not code-generated and
 * updates an accumulator per row, a large part of a micro-batch's CPU (see
 * benchmarks/results/profile.md). The partial aggregation reads every row anyway, so it skips
 * each invalid row by its reason code and emits, per input partition, *sentinel partials* for
 * the reasons that occurred (one per reason; with Spark's HashAggregateExec one per key and
 * reason): the window start is [[sentinelStart]] of the reason and the row count the number of
 * such rows. [[observe]] then sums row counts over partials (a few
 * thousand per batch instead of every row), all counts in one pass ([[InputMetric]]), and drops
 * the sentinels before the shuffle.
 */
private[keyedwatermarks] object InvalidRows {
  val Valid = 0
  val NullKey = 1
  val NullEventTime = 2
  val NullSource = 3
  val BadGap = 4
  val BadLateness = 5
  val FutureEventTime = 6
  val Reasons: Seq[Int] = Seq(NullKey, NullEventTime, NullSource, BadGap, BadLateness, FutureEventTime)

  /** The reason, in words, for a kept invalid row (`kw_reason`) with this code. */
  def describe(code: Column): Column =
    F.when(code === NullKey, "null key").when(code === NullEventTime, "null event time")
      .when(code === NullSource, "null source").when(code === BadGap, "null or non-positive session gap")
      .when(code === BadLateness, "unparsable or negative per-key lateness")
      .otherwise("event time too far ahead of processing time (max_ahead)")

  /**
   * The window start of a sentinel partial: far below any real window (TIMESTAMP's minimum,
   * year 1, is about -6.2e16 microseconds).
   */
  def sentinelStart(reason: Int): Long = Long.MinValue + reason

  /** The reason of a window start if it is a sentinel's (see [[sentinelStart]]), else a value outside [[Reasons]]. */
  def reasonOf(start: Long): Long = start - Long.MinValue
  private val LastSentinel = sentinelStart(Reasons.max)

  /**
   * Observes the input counts over the partials (`windowStart` and `rows` are their columns)
   * and keeps only the real partials. The counts equal those of the rows: every valid row is
   * counted in exactly one partial (its last window), every invalid row in one sentinel.
   */
  def observe(
      partials: DataFrame, windowStart: String, rows: String, withSource: Boolean, withGap: Boolean,
      withLateness: Boolean = false, withFuture: Boolean = false, name: String = InputPlan.InputMetrics,
      onePass: Boolean = true): DataFrame = {
    val start = SparkBridge.expression(partials.col(windowStart))
    val count = SparkBridge.expression(partials.col(rows))
    def counter(reason: Int, column: String) = SparkBridge.column(InputMetric(reason, start, count, onePass)).as(column)
    val metrics = Seq(
      counter(Valid, "input_rows"),
      counter(NullKey, "null_key_rows"),
      counter(NullEventTime, "null_event_time_rows")) ++
      (if (withSource) Seq(counter(NullSource, "null_source_rows")) else Nil) ++
      (if (withGap) Seq(counter(BadGap, "invalid_gap_rows")) else Nil) ++
      (if (withLateness) Seq(counter(BadLateness, "invalid_lateness_rows")) else Nil) ++
      (if (withFuture) Seq(counter(FutureEventTime, "future_event_time_rows")) else Nil)
    partials.observe(name, metrics.head, metrics.tail: _*).where(partials.col(windowStart) > LastSentinel)
  }
}

/**
 * The input rows of the partials `start` (window start) and `rows` (row count), for `reason`:
 * every row ([[InvalidRows.Valid]]) or the sentinels' of one reason. Its columns share one
 * tally (every reason's count), so the observation is one pass (`catalyst.OnePassMetricsExec`).
 */
private[keyedwatermarks] final case class InputMetric(
    field: Int, start: Expression, rows: Expression, onePass: Boolean = true, mutableAggBufferOffset: Int = 0,
    inputAggBufferOffset: Int = 0)
    extends TypedImperativeAggregate[Array[Long]] with BinaryLike[Expression] with TallyField {

  override def left: Expression = start
  override def right: Expression = rows
  override def dataType: DataType = LongType
  override def nullable: Boolean = false
  override def prettyName: String = "kw_input_rows"

  override def createAggregationBuffer(): Array[Long] = new Array[Long](InvalidRows.Reasons.max + 1)

  override def update(buffer: Array[Long], input: InternalRow): Array[Long] = {
    val n = rows.eval(input)
    if (n != null) {
      val count = n.asInstanceOf[Long]
      buffer(InvalidRows.Valid) += count
      val s = start.eval(input)
      if (s != null) {
        val reason = InvalidRows.reasonOf(s.asInstanceOf[Long])
        if (reason > 0 && reason < buffer.length) buffer(reason.toInt) += count
      }
    }
    buffer
  }

  override def merge(buffer: Array[Long], other: Array[Long]): Array[Long] = {
    for (i <- buffer.indices) buffer(i) += other(i)
    buffer
  }

  override def eval(buffer: Array[Long]): Any = buffer(field)

  override def serialize(buffer: Array[Long]): Array[Byte] = {
    val out = ByteBuffer.allocate(8 * buffer.length)
    buffer.foreach(out.putLong)
    out.array()
  }

  override def deserialize(bytes: Array[Byte]): Array[Long] = {
    val in = ByteBuffer.wrap(bytes)
    Array.fill(bytes.length / 8)(in.getLong())
  }

  override def withNewMutableAggBufferOffset(offset: Int): InputMetric = copy(mutableAggBufferOffset = offset)
  override def withNewInputAggBufferOffset(offset: Int): InputMetric = copy(inputAggBufferOffset = offset)
  override protected def withNewChildrenInternal(newLeft: Expression, newRight: Expression): InputMetric =
    copy(start = newLeft, rows = newRight)
}
