package io.github.keyedwatermarks.state

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, JoinedRow}
import org.apache.spark.sql.types.{BooleanType, IntegerType, LongType, StructField, StructType}

/**
 * The row of one open window in state: its stored aggregation buffer (`bufferSchema`), then
 * how many revisions it fired, its end, its start, and whether it changed since it last fired;
 * with accumulation='retracting' (`previousSchema`: the result's schema) also the result of its
 * last pane, which its next pane withdraws; with `onTimeFlag` (sessions with early panes) also
 * whether the session's on-time pane fired (a session's end moves as it grows, so unlike an
 * aligned window's it cannot be told from the key's watermark); with `paneTimes` (emit='every
 * <duration>') also the processing time (ms) of its last pane. Only then, so that the rows
 * (and their fingerprint) of every other query stay as they were. The one place that knows
 * where each field is.
 */
private[keyedwatermarks] final class OpenWindowRows(
    bufferSchema: StructType, previousSchema: Option[StructType] = None, val onTimeFlag: Boolean = false,
    val paneTimes: Boolean = false)
    extends Serializable {
  private val revisionsOrdinal = bufferSchema.length
  private val onTimeOrdinal = revisionsOrdinal + 4 + previousSchema.size
  private val lastPaneOrdinal = onTimeOrdinal + (if (onTimeFlag) 1 else 0)

  /** The rows' schema (its fingerprint guards the stored bytes: field names and order must stay). */
  val schema: StructType = StructType(bufferSchema.fields ++ OpenWindowRows.CommonFields ++
    previousSchema.map(StructField("kw_previous_pane", _, nullable = true)) ++
    (if (onTimeFlag) Seq(StructField("kw_on_time_fired", BooleanType, nullable = false)) else Nil) ++
    (if (paneTimes) Seq(StructField("kw_last_pane_ms", LongType, nullable = false)) else Nil))

  def revisions(row: InternalRow): Int = row.getInt(revisionsOrdinal)
  def end(row: InternalRow): Long = row.getLong(revisionsOrdinal + 1)
  def start(row: InternalRow): Long = row.getLong(revisionsOrdinal + 2)
  def dirty(row: InternalRow): Boolean = row.getBoolean(revisionsOrdinal + 3)

  /** The result of the window's last pane (retracting; null: none, or not retracting). */
  def previous(row: InternalRow): InternalRow = previousSchema match {
    case Some(p) if !row.isNullAt(revisionsOrdinal + 4) => row.getStruct(revisionsOrdinal + 4, p.length)
    case _ => null
  }

  /** Whether the window's on-time pane fired (only with `onTimeFlag`). */
  def onTimeFired(row: InternalRow): Boolean = {
    require(onTimeFlag, "the on-time flag is stored only for sessions with early panes")
    row.getBoolean(onTimeOrdinal)
  }

  /** The processing time (ms) of the window's last pane (only with `paneTimes`; NoPane: none yet). */
  def lastPaneMs(row: InternalRow): Long = {
    require(paneTimes, "pane times are stored only with emit='every <duration>'")
    row.getLong(lastPaneOrdinal)
  }

  /** The row of a window whose buffer, in its stored form, is `storedBuffer`. */
  def row(storedBuffer: InternalRow, revisions: Int, start: Long, end: Long, dirty: Boolean,
      previous: InternalRow = null, onTimeFired: Boolean = false,
      lastPaneMs: Long = OpenWindowRows.NoPane): InternalRow = {
    val fields = new Array[Any](lastPaneOrdinal - revisionsOrdinal + (if (paneTimes) 1 else 0))
    fields(0) = revisions
    fields(1) = end
    fields(2) = start
    fields(3) = dirty
    if (previousSchema.isDefined) fields(4) = previous
    if (onTimeFlag) fields(onTimeOrdinal - revisionsOrdinal) = onTimeFired
    if (paneTimes) fields(lastPaneOrdinal - revisionsOrdinal) = lastPaneMs
    new JoinedRow(storedBuffer, new GenericInternalRow(fields))
  }
}

private[keyedwatermarks] object OpenWindowRows {
  /** The fields after the aggregation buffer that every query's rows have, in order. */
  val CommonFields: Seq[StructField] = Seq(
    StructField("kw_revisions", IntegerType, nullable = false),
    StructField("kw_end", LongType, nullable = false),
    StructField("kw_start", LongType, nullable = false),
    StructField("kw_dirty", BooleanType, nullable = false))

  /** No pane fired yet (the processing time of a last pane). */
  val NoPane: Long = Long.MinValue
}
