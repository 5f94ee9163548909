package io.github.keyedwatermarks.state

import org.apache.spark.sql.{Encoders, Row}
import org.apache.spark.sql.streaming.{MapState, StatefulProcessorHandle, TTLConfig, ValueState}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.{BinaryType, BooleanType, IntegerType, LongType, StructField, StructType}

import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.catalyst.{QuantileSketch, TaskReadyEncoder, UnsafeRowBytes}
import io.github.keyedwatermarks.watermark.{
  AdaptiveLateness, ColumnLateness, FixedLateness, HeldWatermark, KeyRecord, Proposal, WatermarkPolicy
}
import io.github.keyedwatermarks.window.{SessionWindows, SlidingWindows, TumblingWindows, WindowAssigner}

/**
 * Per-key state in Spark's state store (RocksDB provider):
 *  - `key_state`: one row per key, read once and written once per micro-batch: the key's
 *    watermark record (max event time, held watermark, last arrival, lateness, cumulative
 *    late rows and attempted regressions), the event-time timer registered for it, and its
 *    open windows, each (stored Catalyst
 *    aggregation buffer, revisions fired, end, start, changed since it fired), all in one
 *    BINARY of UnsafeRows (see [[KeyState.keySchema]]); a window that already fired stays only
 *    with allowed lateness. One row instead of a row per window saves the state store a
 *    lookup, a write and a prefix scan per (key, window) and batch, and the per-row overhead;
 *    a key has few open windows at a time (those its watermark has not passed);
 *  - `lateness_sketch` (adaptive lateness only): the quantile sketch of how far rows trail;
 *  - `source_watermarks` (min of inputs only): source -> (max event time, last arrival);
 *  - `fleet_skew` (closing='fleet' only): the key's learnt skew and its reference (FleetFloor).
 *  - `dedup_seen` (dedup only): the key's dedup values seen within its horizon ([[DedupEntries]]).
 * Optional variables are registered only when their policy is on, so other queries pay nothing.
 * Field names are Avro-safe, as the state store's schema handling requires.
 */
private[keyedwatermarks] final class KeyState(handle: StatefulProcessorHandle,
    /** The codec of one open window's row (its layout fixed by the planner: planner.PaneRules). */
    val windowRows: OpenWindowRows,
    policy: WatermarkPolicy,
    windows: WindowAssigner,
    dedup: Boolean = false) {
  import KeyState._

  private val keyState: ValueState[Row] =
    handle.getValueState(Contract.KeyStateVariable, TaskReadyEncoder.row(keySchema), TTLConfig.NONE)

  private val sketchState: Option[ValueState[Row]] = policy.proposal.lateness match {
    case Some(_: AdaptiveLateness) =>
      Some(handle.getValueState("lateness_sketch", TaskReadyEncoder.row(QuantileSketch.Schema), TTLConfig.NONE))
    case Some(FixedLateness | ColumnLateness) | None => None
  }

  private val fleetState: Option[ValueState[Row]] =
    policy.fleet.map(_ => handle.getValueState("fleet_skew", TaskReadyEncoder.row(FleetSchema), TTLConfig.NONE))

  val sources: Option[MapState[String, Row]] = policy.proposal match {
    case _: Proposal.MinOfSources =>
      Some(handle.getMapState("source_watermarks", Encoders.STRING, TaskReadyEncoder.row(SourceSchema), TTLConfig.NONE))
    case Proposal.OwnRows(_) | Proposal.ClockOnly => None
  }

  val dedupEntries: Option[DedupEntries] = if (dedup) Some(new DedupEntries(handle)) else None

  // Stamped with this release; state of a newer release is refused naming both (StateRelease).
  private val codec = new UnsafeRowBytes.RowsCodec(windowRows.schema, describe(windows),
    StateRelease.Current.stamp, StateRelease.requireReadable(_, "the open windows in state"))

  /**
   * The key's stored row: its watermark record, event-time timer and open windows (rows of
   * [[OpenWindowRows]], each over the bytes just read, which nothing else shares); None for a key
   * without state (new, or released).
   */
  def load(): Option[StoredKey] = {
    // One read: Spark's exists() is itself a get() (and a decode), so test get() for null.
    val r = keyState.get()
    if (r == null) None
    else Some(StoredKey(
        withFleetSkew(new KeyRecord(r.getLong(0), r.getLong(1), r.getLong(2), r.getLong(3), r.getLong(4),
            r.getLong(5), r.getLong(6), r.getLong(7))),
        r.getLong(EventTimerOrdinal),
        codec.rows(r.getAs[Array[Byte]](OpenWindowsOrdinal), "the open windows in state"),
        r))
  }

  private def withFleetSkew(record: KeyRecord): KeyRecord = {
    fleetState.flatMap(v => Option(v.get())).foreach { f =>
      record.fleetSkew = f.getLong(0)
      record.fleetReference = f.getLong(1)
    }
    record
  }

  /** A key's record before its first row (or after it left state). */
  def fresh(): KeyRecord = HeldWatermark.freshRecord(policy.latenessMicros)

  /**
   * Writes the record, the event-time timer registered for the key ([[NoTimer]]: none) and the
   * open windows (rows of [[OpenWindowRows]]; `earliestStart` the smallest start among them),
   * with their count and earliest start in the clear for read_key_state.
   */
  def store(s: KeyRecord, eventTimerMs: Long, open: Iterator[InternalRow], count: Int, earliestStart: Long): Unit = {
    codec.reset()
    open.foreach(codec.add)
    keyState.update(Row(s.maxEventTime, s.watermark, s.arrivalWatermark, s.lastArrivalMs, s.latenessMicros,
        s.lateRows, s.regressions, s.quietSinceMs, count, earliestStart, eventTimerMs, codec.result()))
    fleetState.foreach(_.update(Row(s.fleetSkew, s.fleetReference)))
  }

  /** Writes the row `stored` was loaded from back as it was, with another event-time timer. */
  def storeEventTimer(stored: StoredKey, eventTimerMs: Long): Unit =
    keyState.update(Row.fromSeq(stored.row.toSeq.updated(EventTimerOrdinal, eventTimerMs)))

  def loadSketch(relativeError: Double): QuantileSketch =
    sketchState.flatMap(v => Option(v.get())) match {
      case Some(row) => QuantileSketch.fromRow(row, relativeError)
      case None => QuantileSketch.empty(relativeError)
    }

  def storeSketch(sketch: QuantileSketch): Unit = sketchState.foreach(_.update(sketch.toRow))

  def clear(): Unit = {
    keyState.clear()
    sketchState.foreach(_.clear())
    fleetState.foreach(_.clear())
    sources.foreach(_.clear())
    dedupEntries.foreach(_.clear())
  }
}

/**
 * A key's stored row as loaded: its watermark record, the event-time timer registered for it
 * (in ms, [[KeyState.NoTimer]]: none), its open windows, and the row itself.
 */
private[keyedwatermarks] final case class StoredKey(
    record: KeyRecord, eventTimerMs: Long, windows: Iterator[InternalRow], row: Row)

private[keyedwatermarks] object KeyState {
  /** No event-time timer is registered for the key. */
  val NoTimer: Long = Long.MinValue

  /**
   * The key's record: what read_key_state shows (docs/semantics.md, "Per-key state"), and the
   * key's event-time timer, which it does not show. Times in
   * microseconds (`_us`) or processing-time milliseconds (`_ms`); `Long.MinValue` means
   * undefined / none.
   */
  val WatermarkSchema: StructType = StructType(Seq(
    "max_event_time_us", "watermark_us", "arrival_watermark_us", "last_arrival_ms", "lateness_us",
    "late_rows", "regressions", "quiet_since_ms").map(StructField(_, LongType, nullable = false)) ++ Seq(
    StructField("open_window_count", IntegerType, nullable = false),
    StructField("earliest_window_start_us", LongType, nullable = false),
    // The event-time timer registered for the key (Spark's global watermark in ms): stored, not
    // re-derived, because it may be earlier than the state needs (see
    // operator.KeyTimers.placeEventTimer).
    StructField("event_timer_ms", LongType, nullable = false)))

  private val EventTimerOrdinal = WatermarkSchema.fieldIndex("event_timer_ms")
  private val OpenWindowsOrdinal = WatermarkSchema.length

  /**
   * The open windows are one BINARY value: rows of [[OpenWindowRows]] (catalyst.UnsafeRowBytes),
   * after fingerprints of that schema and of the window spec, which load() checks (Spark cannot
   * look inside).
   */
  def keySchema: StructType =
    WatermarkSchema.add(StructField("open_windows", BinaryType, nullable = false))

  /**
   * The window spec the stored windows were built for (size, slide, session gap kind): stored
   * windows are found by start, so windows of another spec would be merged into wrongly.
   */
  def describe(windows: WindowAssigner): String = windows match {
    case TumblingWindows(size) => s"tumbling windows of $size microseconds"
    case SlidingWindows(size, slide) => s"sliding windows of $size microseconds every $slide microseconds"
    case SessionWindows(None) => "session windows with a per-row gap"
    case SessionWindows(Some(gap)) => s"session windows with a gap of $gap microseconds"
  }

  val SourceSchema: StructType = StructType(Seq(
      StructField("max_event_time_us", LongType, nullable = false),
      StructField("last_arrival_ms", LongType, nullable = false)))

  val FleetSchema: StructType = StructType(Seq(
      StructField("skew_us", LongType, nullable = false),
      StructField("reference_us", LongType, nullable = false)))
}
