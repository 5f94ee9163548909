package io.github.keyedwatermarks.planner

import org.apache.spark.sql.{DataFrame, functions => F}

import io.github.keyedwatermarks.partials.PartialColumns

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

  def track(partials: DataFrame, lateness: String): DataFrame =
    partials.withColumn(EventTimeColumn, F.timestamp_micros(partials.col(PartialColumns.MaxEventTime)))
      .withWatermark(EventTimeColumn, lateness)
}
