package io.github.keyedwatermarks.state

import org.apache.spark.sql.{Encoder, Encoders, Row}
import org.apache.spark.sql.streaming.{MapState, StatefulProcessorHandle, TTLConfig, ValueState}
import org.apache.spark.sql.types.{IntegerType, LongType, StructField, StructType}

import io.github.keyedwatermarks.compat.QuantileSketch
import io.github.keyedwatermarks.watermark.{AdaptiveLateness, KeyWatermark, KeyWatermarkState, WatermarkPolicy}

/**
 * Per-key state in Spark's state store (RocksDB provider):
 *  - `key_watermark`: the key's watermark record (max event time, held watermark, last
 *    arrival, lateness, cumulative late rows and attempted regressions);
 *  - `open_windows`: window start -> (stored Catalyst aggregation buffer, revisions fired, end);
 *    a window that already fired stays here only with allowed lateness;
 *  - `lateness_sketch` (adaptive lateness only): the quantile sketch of how far rows trail;
 *  - `source_watermarks` (min of inputs only): source -> (max event time, last arrival).
 * Optional variables are registered only when their policy is on, so other queries pay nothing.
 * Field names are Avro-safe, as the state store's schema handling requires.
 */
final class KeyState(handle: StatefulProcessorHandle, bufferSchema: StructType, policy: WatermarkPolicy) {
  import KeyState._

  private val watermarkState: ValueState[Row] =
    handle.getValueState("key_watermark", Encoders.row(WatermarkSchema), TTLConfig.NONE)

  val openWindows: MapState[java.lang.Long, Row] =
    handle.getMapState("open_windows", Encoders.LONG: Encoder[java.lang.Long],
      Encoders.row(windowSchema(bufferSchema)), TTLConfig.NONE)

  private val sketchState: Option[ValueState[Row]] = policy.lateness match {
    case _: AdaptiveLateness =>
      Some(handle.getValueState("lateness_sketch", Encoders.row(QuantileSketch.Schema), TTLConfig.NONE))
    case _ => None
  }

  val sources: Option[MapState[String, Row]] = policy.sources.map(_ =>
    handle.getMapState("source_watermarks", Encoders.STRING, Encoders.row(SourceSchema), TTLConfig.NONE))

  def loadWatermark(): KeyWatermarkState =
    if (watermarkState.exists()) {
      val r = watermarkState.get()
      new KeyWatermarkState(r.getLong(0), r.getLong(1), r.getLong(2), r.getLong(3), r.getLong(4), r.getLong(5), r.getLong(6))
    } else KeyWatermark.fresh(policy.latenessMicros)

  def storeWatermark(s: KeyWatermarkState): Unit =
    watermarkState.update(Row(s.maxEventTime, s.watermark, s.arrivalWatermark, s.lastArrivalMs, s.latenessMicros,
      s.lateRows, s.regressions))

  def loadSketch(relativeError: Double): QuantileSketch = sketchState match {
    case Some(v) if v.exists() => QuantileSketch.fromRow(v.get(), relativeError)
    case _ => QuantileSketch.empty(relativeError)
  }

  def storeSketch(sketch: QuantileSketch): Unit = sketchState.foreach(_.update(sketch.toRow))

  def clear(): Unit = {
    watermarkState.clear()
    openWindows.clear()
    sketchState.foreach(_.clear())
    sources.foreach(_.clear())
  }
}

object KeyState {
  /** A window in state: its stored aggregation buffer, how many revisions it fired, its end. */
  def windowSchema(bufferSchema: StructType): StructType = bufferSchema
    .add(StructField("kw_revisions", IntegerType, nullable = false))
    .add(StructField("kw_end", LongType, nullable = false))

  val WatermarkSchema: StructType = StructType(Seq(
    "max_event_time_us", "watermark_us", "arrival_watermark_us", "last_arrival_ms", "lateness_us",
    "late_rows", "regressions").map(StructField(_, LongType, nullable = false)))

  val SourceSchema: StructType = StructType(Seq(
    StructField("max_event_time_us", LongType, nullable = false),
    StructField("last_arrival_ms", LongType, nullable = false)))
}
