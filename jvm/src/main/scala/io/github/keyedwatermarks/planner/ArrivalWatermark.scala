package io.github.keyedwatermarks.planner

import org.apache.spark.sql.{Column, DataFrame, functions => F}

import io.github.keyedwatermarks.partials.PartialColumns
import io.github.keyedwatermarks.watermark.WatermarkPolicy

/**
 * The arrival clock of the idle options (docs/semantics.md, "Idle keys"): Spark's global
 * watermark defined on each row's arrival time (`arrival_time`) with delay 0. Spark keeps it as
 * for any query: the max arrival time of a batch's rows from the next batch on, in the checkpoint
 * across restarts, advanced batch by batch while a backlog is read; the operator (TimeMode
 * EventTime) reads it as the idle rules' "now" and sets their timers on it.
 *
 * It is defined on the projected input rows, before the partial aggregation: every row with an
 * arrival time moves it (valid or not: the stream's clock). The partials carry the max arrival
 * per (key, window) besides, for each key's last arrival. No output column of the partials
 * carries its metadata, so Spark drops no row on our behalf. (Spark's global watermark on event
 * time, planner.GlobalWatermark, is over the partials instead; one query has one, so the two
 * never combine: spec.WatermarkSpec refuses it.)
 */
private[keyedwatermarks] object ArrivalWatermark {

  /** The projected columns: the arrival time in micros (Long.MinValue when null) and as a TIMESTAMP. */
  def columns(arrivalTime: Column): Seq[Column] = Seq(
    F.coalesce(F.unix_micros(arrivalTime), F.lit(Long.MinValue)).as(PartialColumns.Arrival),
    arrivalTime.as(PartialColumns.ArrivalTime))

  /** The projected input with Spark's global watermark on the arrival time, when the policy uses the arrival clock. */
  def track(projected: DataFrame, policy: WatermarkPolicy): DataFrame =
    if (!policy.usesArrivalClock) projected
    else projected.withWatermark(PartialColumns.ArrivalTime, "0 seconds")
}
