package io.github.keyedwatermarks.planner

import org.apache.spark.sql.{DataFrame, functions => F}
import org.apache.spark.sql.catalyst.plans.logical.{EventTimeWatermark, LogicalPlan}

import io.github.keyedwatermarks.partials.PartialColumns
import io.github.keyedwatermarks.spec.WatermarkSpec

/**
 * Spark's global watermark, for the policies that follow it (the skew bound, closing='global'):
 * `withWatermark(lateness)` on the partials' max event time, once the invalid rows' sentinels
 * are dropped. Spark then keeps it as for any query: the max over a batch's rows, minus
 * lateness, from the next batch on, in the checkpoint across restarts.
 *
 * Why on the partials and not on the input rows: Spark's EventTimeWatermarkExec is not
 * code-generated and updates an accumulator per row. On the input it cut the generated loop in
 * two (scan and projection, then window assignment and partial aggregation, with every row
 * written out as an UnsafeRow in between) and ran per row; over the partials it sees one row
 * per (key, window) and partition. The maximum is the same: every valid row is in a partial
 * whose max event time covers it. Invalid rows (a null key, an event time too far ahead of
 * processing time, ...) are only in the sentinels, so they do not move it.
 *
 * The column is dropped again before the operator ([[KeyedPlanner.prepare]] keeps only payload
 * and keys), so no input column of `transformWithState` carries watermark metadata and Spark
 * drops no partial on our behalf.
 */
private[keyedwatermarks] object GlobalWatermark {
  val EventTimeColumn = "kw_global_watermark_event_time"

  /**
   * The partials, with Spark's global watermark defined on them unless the stage's input
   * `upstream` already defines one (a `withWatermark`, e.g. for dropDuplicatesWithinWatermark
   * or a stream-stream join, or an earlier keyed stage's own): the stage then follows that one
   * (docs/semantics.md, "Keyed stages in a pipeline"), since Spark keeps one global watermark
   * per query and refuses a `withWatermark` after a stateful operator. A stateful operator
   * upstream without any watermark leaves nothing to follow: refused, naming the options.
   */
  def followOrTrack(partials: DataFrame, spec: WatermarkSpec, upstream: LogicalPlan): DataFrame =
    if (arrivalClockUpstream(upstream)) throw new IllegalArgumentException(
      "max_skew / closing: this keyed stage follows Spark's global watermark on event time, but an upstream " +
        "keyed stage's idle options define it on the arrival time (arrival_time: the arrival clock), so it " +
        "does not measure event time; set max_skew='unbounded' on this stage")
    else if (KeyedStages.watermarkUpstream(upstream)) partials
    else if (KeyedStages.statefulUpstream(upstream)) throw new IllegalArgumentException(
      "max_skew / closing: this keyed stage follows Spark's global watermark, but a stateful operator " +
        "upstream has none and Spark refuses to define one after it; define it upstream " +
        "(withWatermark before that operator, or leave the upstream keyed stage's max_skew at its default) " +
        "or set max_skew='unbounded' on this stage")
    else track(partials, spec.lateness.text)

  /** Whether Spark's global watermark upstream is an earlier keyed stage's arrival clock (planner.ArrivalWatermark). */
  def arrivalClockUpstream(upstream: LogicalPlan): Boolean = upstream.exists {
    case e: EventTimeWatermark => e.eventTime.name == PartialColumns.ArrivalTime
    case _ => false
  }

  def track(partials: DataFrame, lateness: String): DataFrame =
    partials.withColumn(EventTimeColumn, F.timestamp_micros(partials.col(PartialColumns.MaxEventTime)))
      .withWatermark(EventTimeColumn, lateness)
}
