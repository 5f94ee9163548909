package io.github.keyedwatermarks.join

import org.apache.spark.sql.{Column, DataFrame, Row, functions => F}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.types.{LongType, StructField, StructType}

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
 * The operator writes, after its rows of a key, one key row (status [[KeyStatus]], the join's
 * columns null, [[KeyColumn]] set): the observation reads it, then it is dropped. The operator's
 * output is therefore nullable everywhere, and the join's own nullability is restored after.
 */
private[keyedwatermarks] object JoinMetrics {
  val Base: String = Contract.JoinMetrics
  val KeyColumn = "kw_join_key"
  val KeyStatus = "kw_key"
  val KeySchema: StructType = StructType(Seq(
      StructField("held_rows", LongType, nullable = false), StructField("watermark", LongType, nullable = true)))

  /** The key row's metrics part: rows the key holds, its watermark in microseconds (None before it has one). */
  def keyPart(heldRows: Long, watermark: Option[Long]): Row = Row(heldRows, watermark.getOrElse(null))

  /** The operator's output schema: the join's columns, all nullable (for the key rows), then [[KeyColumn]]. */
  def operatorSchema(join: StructType): StructType =
    StructType(join.fields.map(_.copy(nullable = true)) :+ StructField(KeyColumn, KeySchema, nullable = true))

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
    val status = out.col(JoinInputs.StatusColumn)
    val watermark = out.col(KeyColumn).getField("watermark")
    val highest = F.max(watermark)
    def seconds(micros: Column): Column = micros / 1e6
    // The q-quantile of the lags (highest - w) is highest minus the (1 - q)-quantile of w.
    def lag(q: Double): Column =
      seconds(highest - F.percentile_approx(watermark, F.lit(1 - q), F.lit(10000))).as(
        s"watermark_lag_p${(q * 100).round}_s")
    val counts = statuses.map(s => F.count(F.when(status === s, 1)).as(s"${s}_rows"))
    val withMetrics = out.observe(KeyedStages.metricsName(Base, name), counts.head,
      counts.tail ++ Seq(
        F.count(F.when(status === KeyStatus, 1)).as("keys_in_batch"),
        F.coalesce(F.max(out.col(KeyColumn).getField("held_rows")), F.lit(0L)).as("held_rows_max"),
        seconds(highest - highest).as("watermark_lag_min_s"), lag(0.5), lag(0.95),
        seconds(highest - F.min(watermark)).as("watermark_lag_max_s")): _*)
    SparkInternals.withNullability(
      withMetrics.where(withMetrics.col(JoinInputs.StatusColumn) =!= KeyStatus).drop(KeyColumn), join)
  }
}
