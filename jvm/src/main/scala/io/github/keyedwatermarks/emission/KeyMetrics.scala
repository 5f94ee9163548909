package io.github.keyedwatermarks.emission

import org.apache.spark.sql.{Column, DataFrame, functions => F}

/**
 * The per-batch key metrics in `observedMetrics["keyed_watermarks_output"]`, from the "key"
 * rows the operator emits for every key a micro-batch handled (with rows, or by a timer; see
 * [[WindowEmitter.KeyMetricsColumn]]). Spark's own `numRowsTotal` of the state operator gives
 * the rows in state; these say what happened to the keys of the batch:
 *  - `keys_in_batch`, `keys_with_data`, `keys_new` (no state before: first seen, or returning
 *    after leaving state), `keys_released` (left state), `open_windows` (of those keys, after);
 *  - `watermark_lag_{min,p50,p95,max}_s`: how far their watermarks trail Spark's global
 *    watermark (the most advanced keys' watermark), in seconds, negative for a key ahead of it;
 *    without a global watermark (max_skew="unbounded", processing-time policies) the highest
 *    watermark among those keys stands in for it;
 *  - `duplicate_rows`: rows dropped as copies of a row the key already had (option `dedup`);
 *  - `stuck_keys`: those trailing Spark's global watermark by more than `stuck_after` (null
 *    without a global watermark).
 * With a global watermark, p50 and p95 are within 0.4% of a lag of that rank (LagQuantiles);
 * without one they are Spark's `percentile_approx` (accuracy 10000). Min and max are exact.
 */
private[keyedwatermarks] object KeyMetrics {
  def columns(all: DataFrame, stuckAfterMicros: Long): Seq[Column] = {
    import WindowEmitter._
    val isKey = all.col(KindColumn) === KeyKindValue
    val m = all.col(KeyMetricsColumn)
    def flagged(flag: Int) = F.count(F.when(isKey && m.getField("flags").bitwiseAND(flag) =!= 0, 1))
    val lag = m.getField("lag")
    val wm = m.getField("watermark")
    // Within a batch either every key with a watermark has a lag (Spark's global watermark is
    // defined) or none has. With lags: min and max exact, p50 and p95 from a log-bucket
    // histogram (LagQuantiles: percentile_approx's sorting was the metrics' main cost with many
    // keys). Without (max_skew="unbounded", processing-time policies, a skew bound's first
    // batch): the lag of a key stands as the highest watermark minus its own, so the min is 0,
    // the max the highest minus the lowest watermark, and the q quantile the highest watermark
    // plus the q quantile of minus the watermarks; these are epoch-sized values, for which a
    // relative error would be hours, so percentile_approx (rank error) stays, fed only by keys
    // without a lag.
    // Each aggregate in a column is its own accumulator: observe() shares none between columns
    // (AggregatingAccumulator builds every occurrence anew), so each sketch appears in exactly
    // one column and min and max use Spark's declarative min/max (generated code, no sketch).
    val hasLag = F.count(lag) > 0
    val highest = F.max(wm)
    def seconds(withLag: Column, withoutLag: Column) = F.when(hasLag, withLag).otherwise(withoutLag) / 1e6
    def quantile(q: Double, i: Int) = seconds(LagQuantiles(lag).getItem(i),
      F.percentile_approx(F.when(lag.isNull, -wm), F.lit(q), F.lit(10000)) + highest)
    Seq(
      F.count(F.when(isKey, 1)).as("keys_in_batch"),
      flagged(HadRows).as("keys_with_data"),
      flagged(WasNew).as("keys_new"),
      flagged(Released).as("keys_released"),
      F.coalesce(F.sum(m.getField("open_windows")), F.lit(0L)).as("open_windows"),
      F.coalesce(F.sum(m.getField("duplicates")), F.lit(0L)).as("duplicate_rows"),
      seconds(F.min(lag), F.when(highest.isNotNull, F.lit(0L))).as("watermark_lag_min_s"),
      quantile(0.5, 1).as("watermark_lag_p50_s"),
      quantile(0.95, 2).as("watermark_lag_p95_s"),
      seconds(F.max(lag), highest - F.min(wm)).as("watermark_lag_max_s"),
      F.when(hasLag, F.count(F.when(lag > stuckAfterMicros, 1))).as("stuck_keys"))
  }
}
