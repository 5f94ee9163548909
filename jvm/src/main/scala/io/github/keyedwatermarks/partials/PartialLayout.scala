package io.github.keyedwatermarks.partials

import org.apache.spark.sql.types.{ArrayType, StructType}

/**
 * The columns of the partial aggregation ([[PartialAggregation]]): its output, its payload and
 * the optional policy columns it reads from the projected input.
 *
 * Output row: [[Payload]], [[WindowStart]], [[Rows]], [[MaxEventTime]], then the key columns.
 * Window start, row count and max event time are columns of their own besides the payload: for
 * the input metrics before the shuffle, and for Spark's global watermark
 * (planner.GlobalWatermark), which then follows the partials instead of every input row.
 *
 * Payload (one UnsafeRow, see catalyst.UnsafeRowBytes; decoded by [[PartialLayout]]), in order:
 *  - the stored aggregate buffer fields b0..bn, first, so that a payload row is directly the
 *    right-hand side of CatalystAggregation.merge;
 *  - [[WindowStart]], [[Rows]], [[MaxEventTime]];
 *  - the optional policy fields: [[Lateness]], [[SessionEnd]], [[Arrival]], [[EventTimes]], [[Source]];
 *  - with dedup: [[Dedup]], [[DedupPartition]], [[Duplicates]];
 *  - [[KeptRows]], when late rows are kept.
 */
private[keyedwatermarks] object PartialColumns {
  /** The payload: the partial as UnsafeRow bytes. */
  val Payload = "kw_payload"
  val WindowStart = "kw_window_start"

  /**
   * The rows whose *last* window is this one: with sliding windows a row counts as late only
   * when all its windows are closed, and a row is counted once in the input metrics.
   */
  val Rows = "kw_rows"
  val MaxEventTime = "kw_max_event_time"

  /** The original rows a partial counts (array of structs), kept so that late ones can be emitted. */
  val KeptRows = "kw_kept_rows"

  /** Every counted row's event time (adaptive lateness learns from them). */
  val EventTimes = "kw_event_times"

  /** Input: a row's lateness (per-key lateness); payload: the partial's max. */
  val Lateness = "kw_lateness_us"

  /** Input and payload: the row's source (min of inputs); part of the grouping. */
  val Source = "kw_source"

  /** Input: a row's own session end, t + gap, in microseconds (per-row gaps). */
  val RowSessionEnd = "kw_row_session_end_us"

  /** Payload: a session partial's end (the max of its rows' [[RowSessionEnd]]). */
  val SessionEnd = "kw_session_end"

  /**
   * Input: a row's arrival time in microseconds (Long.MinValue when null; the idle options on
   * the arrival clock); payload: the partial's max.
   */
  val Arrival = "kw_arrival_us"

  /** Input: a row's arrival time as a TIMESTAMP, the column of Spark's global watermark (the arrival clock). */
  val ArrivalTime = "kw_arrival_time"

  /**
   * Input and payload: the row's dedup values, a struct (option `dedup`); part of the grouping,
   * so that a partial holds one row's values (its copies in the partition are dropped there).
   */
  val Dedup = "kw_dedup"

  /** Payload (dedup): the input partition of the partial, which tells one row's windows from a copy's. */
  val DedupPartition = "kw_dedup_partition"

  /** Payload (dedup): copies of the partial's row dropped within its input partition. */
  val Duplicates = "kw_duplicates"
}

/** Ordinals of a partial's payload fields (-1 when absent); see [[PartialColumns]] for the layout. */
private[keyedwatermarks] final case class PartialLayout(
    windowStart: Int, rows: Int, maxEventTime: Int, lateness: Int, eventTimes: Int, source: Int,
    sessionEnd: Int, kept: Int, keptWidth: Int, dedup: Int = -1, dedupWidth: Int = 0, dedupPartition: Int = -1,
    duplicates: Int = -1, arrival: Int = -1)

private[keyedwatermarks] object PartialLayout {
  def apply(payloadSchema: StructType): PartialLayout = {
    def ordinal(name: String) = payloadSchema.fieldNames.indexOf(name)
    val kept = ordinal(PartialColumns.KeptRows)
    val dedup = ordinal(PartialColumns.Dedup)
    val keptWidth = if (kept < 0) 0
    else payloadSchema(kept).dataType match {
      case a: ArrayType => a.elementType.asInstanceOf[StructType].length
      case _ => 0
    }
    PartialLayout(ordinal(PartialColumns.WindowStart), ordinal(PartialColumns.Rows),
      ordinal(PartialColumns.MaxEventTime), ordinal(PartialColumns.Lateness),
      ordinal(PartialColumns.EventTimes), ordinal(PartialColumns.Source),
      ordinal(PartialColumns.SessionEnd), kept, keptWidth, dedup,
      if (dedup < 0) 0 else payloadSchema(dedup).dataType.asInstanceOf[StructType].length,
      ordinal(PartialColumns.DedupPartition), ordinal(PartialColumns.Duplicates), ordinal(PartialColumns.Arrival))
  }
}
