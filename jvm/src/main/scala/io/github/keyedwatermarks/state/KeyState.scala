package io.github.keyedwatermarks.state

import org.apache.spark.sql.{Encoder, Encoders, Row}
import org.apache.spark.sql.streaming.{MapState, StatefulProcessorHandle, TTLConfig, ValueState}
import org.apache.spark.sql.types.{IntegerType, LongType, StructField, StructType}

import io.github.keyedwatermarks.watermark.KeyWatermark

/**
 * Per-key state in Spark's state store (RocksDB provider):
 *  - `key_watermark`: (max event time, cumulative late rows) of the key;
 *  - `open_windows`: window start -> (stored Catalyst aggregation buffer, revisions fired);
 *    a window that already fired stays here only with allowed lateness.
 * Field names are Avro-safe, as the state store's schema handling requires.
 */
final class KeyState(handle: StatefulProcessorHandle, bufferSchema: StructType) {
  import KeyState._

  private val watermarkState: ValueState[Row] =
    handle.getValueState("key_watermark", Encoders.row(WatermarkSchema), TTLConfig.NONE)

  val openWindows: MapState[java.lang.Long, Row] =
    handle.getMapState("open_windows", Encoders.LONG: Encoder[java.lang.Long],
      Encoders.row(windowSchema(bufferSchema)), TTLConfig.NONE)

  /** (max event time or Undefined, cumulative late rows). */
  def loadWatermark(): (Long, Long) =
    if (watermarkState.exists()) {
      val r = watermarkState.get()
      (r.getLong(0), r.getLong(1))
    } else (KeyWatermark.Undefined, 0L)

  def storeWatermark(maxEventTime: Long, lateRows: Long): Unit =
    watermarkState.update(Row(maxEventTime, lateRows))

  def clear(): Unit = {
    watermarkState.clear()
    openWindows.clear()
  }
}

object KeyState {
  /** A window in state: its stored aggregation buffer, how many revisions it fired, its end. */
  def windowSchema(bufferSchema: StructType): StructType = bufferSchema
    .add(StructField("kw_revisions", IntegerType, nullable = false))
    .add(StructField("kw_end", LongType, nullable = false))

  val WatermarkSchema: StructType = StructType(Seq(
    StructField("max_event_time_us", LongType, nullable = false),
    StructField("late_rows", LongType, nullable = false)))
}
