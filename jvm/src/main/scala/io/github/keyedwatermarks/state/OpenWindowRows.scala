package io.github.keyedwatermarks.state

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.JoinedRow
import org.apache.spark.sql.types.{BooleanType, IntegerType, LongType, StructField, StructType}

/**
 * The row of one open window in state: its stored aggregation buffer (`bufferSchema`), then
 * how many revisions it fired, its end, its start, and whether it changed since it last fired;
 * with accumulation='retracting' (`previousSchema`: the result's schema) also the result of its
 * last pane, which its next pane withdraws. Only then, so that the rows (and their fingerprint)
 * of every other query stay as they were. The one place that knows where each field is.
 */
private[keyedwatermarks] final class OpenWindowRows(bufferSchema: StructType, previousSchema: Option[StructType] = None)
    extends Serializable {
  private val revisionsOrdinal = bufferSchema.length

  /** The rows' schema (its fingerprint guards the stored bytes: field names and order must stay). */
  val schema: StructType = StructType(bufferSchema.fields ++ OpenWindowRows.CommonFields ++
    previousSchema.map(StructField("kw_previous_pane", _, nullable = true)))

  def revisions(row: InternalRow): Int = row.getInt(revisionsOrdinal)
  def end(row: InternalRow): Long = row.getLong(revisionsOrdinal + 1)
  def start(row: InternalRow): Long = row.getLong(revisionsOrdinal + 2)
  def dirty(row: InternalRow): Boolean = row.getBoolean(revisionsOrdinal + 3)

  /** The result of the window's last pane (retracting; null: none, or not retracting). */
  def previous(row: InternalRow): InternalRow = previousSchema match {
    case Some(p) if !row.isNullAt(revisionsOrdinal + 4) => row.getStruct(revisionsOrdinal + 4, p.length)
    case _ => null
  }

  /** The row of a window whose buffer, in its stored form, is `storedBuffer`. */
  def row(storedBuffer: InternalRow, revisions: Int, start: Long, end: Long, dirty: Boolean,
      previous: InternalRow = null): InternalRow =
    new JoinedRow(storedBuffer,
      if (previousSchema.isEmpty) InternalRow(revisions, end, start, dirty)
      else InternalRow(revisions, end, start, dirty, previous))
}

private[keyedwatermarks] object OpenWindowRows {
  /** The fields after the aggregation buffer that every query's rows have, in order. */
  val CommonFields: Seq[StructField] = Seq(
    StructField("kw_revisions", IntegerType, nullable = false),
    StructField("kw_end", LongType, nullable = false),
    StructField("kw_start", LongType, nullable = false),
    StructField("kw_dirty", BooleanType, nullable = false))
}
