package io.github.keyedwatermarks.input

import org.apache.spark.sql.{Column, DataFrame, functions => F}

/**
 * Rows that can never be aggregated (null key, null event time, null source, a session gap
 * that ends before the row starts, an unparsable or negative per-key lateness, an event time
 * further ahead of processing time than `max_ahead`), and the per-batch input counts in
 * `query.lastProgress.observedMetrics["keyed_watermarks_input"]`.
 *
 * Why not `observe()` the input rows: Spark's CollectMetricsExec is not code-generated and
 * updates an accumulator per row, which cost up to a sixth of the CPU of a micro-batch (see
 * benchmarks/results/profile.md). The partial aggregation reads every row anyway, so it skips
 * each invalid row by its reason code and emits, per input partition, *sentinel partials* for
 * the reasons that occurred (one per reason; with Spark's HashAggregateExec one per key and
 * reason): the window start is [[sentinelStart]] of the reason and the row count the number of
 * such rows. [[observe]] then sums row counts over partials (a few
 * thousand per batch instead of every row) and drops the sentinels before the shuffle.
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
  private val LastSentinel = sentinelStart(Reasons.max)

  /**
   * Observes the input counts over the partials (`windowStart` and `rows` are their columns)
   * and keeps only the real partials. The counts equal those of the rows: every valid row is
   * counted in exactly one partial (its last window), every invalid row in one sentinel.
   */
  def observe(
      partials: DataFrame, windowStart: String, rows: String, withSource: Boolean, withGap: Boolean,
      withLateness: Boolean = false, withFuture: Boolean = false, name: String = InputPlan.InputMetrics): DataFrame = {
    val start = partials.col(windowStart)
    val count = partials.col(rows)
    def total(c: Column) = F.coalesce(F.sum(c), F.lit(0L))
    def ofReason(reason: Int) = total(F.when(start === sentinelStart(reason), count))
    val metrics = Seq(
      total(count).as("input_rows"),
      ofReason(NullKey).as("null_key_rows"),
      ofReason(NullEventTime).as("null_event_time_rows")) ++
      (if (withSource) Seq(ofReason(NullSource).as("null_source_rows")) else Nil) ++
      (if (withGap) Seq(ofReason(BadGap).as("invalid_gap_rows")) else Nil) ++
      (if (withLateness) Seq(ofReason(BadLateness).as("invalid_lateness_rows")) else Nil) ++
      (if (withFuture) Seq(ofReason(FutureEventTime).as("future_event_time_rows")) else Nil)
    partials.observe(name, metrics.head, metrics.tail: _*).where(start > LastSentinel)
  }
}
