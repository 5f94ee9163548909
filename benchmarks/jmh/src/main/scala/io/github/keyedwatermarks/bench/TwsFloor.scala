package io.github.keyedwatermarks.bench

import org.apache.spark.sql.{DataFrame, Encoders, Row, functions => F}
import org.apache.spark.sql.streaming.{OutputMode, StatefulProcessor, TimeMode, TTLConfig, TimerValues, ValueState}
import org.apache.spark.sql.types.{DoubleType, LongType, StringType, StructField, StructType}

/**
 * The floor of Spark's stateful machinery for the end-to-end harness (`tws_floor` in
 * benchmarks/harness/methods.py): the same input, shuffle partitions and state store as ours,
 * but the least a `transformWithState` query can do per key: one value per key (the running
 * count and sum of `temp`), read once and written once per batch, one output row per key per
 * batch. No windows, no watermark, no timers, no metrics. What ours costs above it is ours.
 *
 * Lives in the JMH source set, not in the library: it is a measuring stick, not an API. The
 * harness adds this project's jar to the benchmark session (`--floor-jar`).
 */
object TwsFloor {
  val OutputSchema: StructType = StructType(Seq(
      StructField("device", StringType),
      StructField("n", LongType),
      StructField("avg_temp", DoubleType)))

  /** `events` (device STRING, ts TIMESTAMP, temp DOUBLE) through the floor processor. */
  def apply(events: DataFrame, keyColumn: String): DataFrame = {
    val keySchema = StructType(Seq(events.schema(keyColumn)))
    val input = events.select(F.col(keyColumn), F.col("temp"))
    input
      .groupBy(F.col(keyColumn))
      .as(Encoders.row(keySchema), Encoders.row(input.schema))
      .transformWithState(new FloorProcessor, TimeMode.None(), OutputMode.Append())(Encoders.row(OutputSchema))
      .toDF()
  }
}

final class FloorProcessor extends StatefulProcessor[Row, Row, Row] {
  @transient private var total: ValueState[(Long, Double)] = _

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit = {
    total = getHandle.getValueState[(Long, Double)](
      "total", Encoders.tuple(Encoders.scalaLong, Encoders.scalaDouble), TTLConfig.NONE)
  }

  override def handleInputRows(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    var (n, sum) = if (total.exists()) total.get() else (0L, 0.0)
    rows.foreach { r =>
      n += 1
      if (!r.isNullAt(1)) sum += r.getDouble(1)
    }
    total.update((n, sum))
    Iterator.single(Row(key.get(0), n, sum / n))
  }
}
