package io.github.keyedwatermarks.join

import org.apache.spark.sql.{Column, DataFrame, functions => F}
import org.apache.spark.sql.types.{BooleanType, LongType, StructField, StructType}

import io.github.keyedwatermarks.catalyst.SparkInternals
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
 * observation reads only those rows' fields, not every output row's status; it is then dropped.
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

  /**
   * The join's rows (`join`: its schema) from the operator's `out`, observed: `statuses` are the
   * join's output statuses, each counted; the key rows feed the key metrics and are dropped.
   */
  def observed(out: DataFrame, name: String, statuses: Seq[String], join: StructType): DataFrame = {
    val key = out.col(KeyColumn)
    val watermark = key.getField("watermark")
    val highest = F.max(watermark)
    def seconds(micros: Column): Column = micros / 1e6
    // The q-quantile of the lags (highest - w) is highest minus the (1 - q)-quantile of w.
    def lag(q: Double): Column =
      seconds(highest - F.percentile_approx(watermark, F.lit(1 - q), F.lit(10000))).as(
        s"watermark_lag_p${(q * 100).round}_s")
    val counts = statuses.map(s => F.coalesce(F.sum(key.getField(s"${s}_rows")), F.lit(0L)).as(s"${s}_rows"))
    val withMetrics = out.observe(KeyedStages.metricsName(Base, name), counts.head,
      counts.tail ++ Seq(
        F.count(F.when(key.getField("key"), 1)).as("keys_in_batch"),
        F.coalesce(F.max(key.getField("held_rows")), F.lit(0L)).as("held_rows_max"),
        seconds(highest - highest).as("watermark_lag_min_s"), lag(0.5), lag(0.95),
        seconds(highest - F.min(watermark)).as("watermark_lag_max_s")): _*)
    SparkInternals.withNullability(withMetrics.where(withMetrics.col(KeyColumn).isNull).drop(KeyColumn), join)
  }
}
