package io.github.keyedwatermarks.emission

import org.apache.spark.sql.{DataFrame, Row, functions => F}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, JoinedRow}
import org.apache.spark.sql.types.{
  BinaryType, BooleanType, IntegerType, LongType, StringType, StructType, TimestampType
}
import org.apache.spark.unsafe.types.UTF8String

import io.github.keyedwatermarks.catalyst.{ProjectionPool, RowFromBytes, SparkInternals, UnsafeRowBytes}
import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.input
import io.github.keyedwatermarks.watermark.HeldWatermark

/**
 * Builds the operator's output rows: the result columns (exactly those of
 * `groupBy(keys, window).agg(...)`, plus `revision` when allowed lateness is set: 0 for a
 * window's first firing, then 1, 2, ... for late firings) followed by report columns:
 *  - `kw_kind`: "window" for an emitted window, "late" for a per-key, per-batch late-row
 *    count, "late_row" for one kept late row, "invalid_row" for one kept invalid row,
 *    "watermark" for a key whose watermark was held (see `kw_regressions`);
 *  - `kw_late_rows`: number of late rows of the key in this batch ("late" rows only);
 *  - `kw_watermark`: the key's watermark at the start of the batch (null if undefined);
 *  - `kw_regressions`: on a "watermark" row (one per key and batch in which the watermark
 *    policy proposed a value below the held watermark): the key's attempted regressions so far;
 *  - when late rows are kept: `kw_late_row` (the original row, as a struct) and `kw_reason`;
 *  - internal: `kw_key_metrics` on one "key" row per task, the per-key metrics' tally
 *    (observed, then dropped with those rows: see [[WindowEmitter.KeyMetricsColumn]]).
 * The public `agg()` keeps only the window rows and drops the report columns.
 *
 * The operator hands each output row to `transformWithState` as one BINARY value, the row's
 * bytes in Spark's UnsafeRow format ([[OperatorOutputSchema]]), and [[columns]] reads them back
 * in place: an external Row per output row would cost a conversion of every field each way
 * (strings decoded to Java and encoded again, a Row per struct; benchmarks/results/profile.md).
 */
private[keyedwatermarks] final class WindowEmitter(
    val aggregateSchema: StructType,
    keyOrdinalsInResult: Array[Int],
    lateRowSchema: Option[StructType],
    withRevision: Boolean,
    emission: PaneRule = PaneRule.Final)
    extends Serializable {
  import WindowEmitter._

  /**
   * The result columns: those of groupBy().agg(), plus `revision` with allowed lateness, or,
   * when panes are emitted, `kw_pane` and `kw_pane_index` (which replaces `revision`), and
   * `kw_retraction` when retracting.
   */
  val resultSchema: StructType = {
    val base =
      if (withRevision) aggregateSchema.add(RevisionColumn, IntegerType, nullable = false) else aggregateSchema
    val panes =
      if (!emission.withPaneColumns) base
      else
        base.add(Pane.PaneColumn, StringType, nullable = false).add(Pane.PaneIndexColumn, IntegerType, nullable = false)
    if (emission.retracting) panes.add(Pane.RetractionColumn, BooleanType, nullable = false) else panes
  }

  /** The result columns after groupBy().agg()'s: `revision` or the pane columns. */
  private val addedResultColumns = resultSchema.length - aggregateSchema.length

  /**
   * Report rows ("late", "watermark", ...) leave the result columns other than the keys null,
   * so the output declares them nullable, also those groupBy().agg() declares non-null
   * (`window`, `count`): Spark 4.0-4.2's row encoders fail a null in a non-null column
   * (EXPRESSION_DECODING_FAILED on a null `window` struct; 4.3's let it through).
   * [[windowsOnly]] gives the window rows their nullability back.
   */
  val outputSchema: StructType = {
    val base = StructType(resultSchema.fields.map(_.copy(nullable = true)))
      .add(KindColumn, StringType, nullable = false)
      .add(LateRowsColumn, LongType, nullable = true)
      .add(WatermarkColumn, TimestampType, nullable = true)
      .add(RegressionsColumn, LongType, nullable = true)
    lateRowSchema.fold(base)(s =>
      base.add(LateRowColumn, s, nullable = true).add(ReasonColumn, StringType, nullable = true))
      .add(KeyMetricsColumn, BinaryType, nullable = true)
  }

  /** The window rows of the output, with the result columns only, as groupBy().agg() types them. */
  def windowsOnly(output: DataFrame): DataFrame =
    SparkInternals.withNullability(output.where(output.col(KindColumn) === Contract.Kinds.Window), resultSchema)

  /** The operator's output (rows of [[OperatorOutputSchema]]) as the columns of [[outputSchema]]. */
  def columns(operatorOutput: DataFrame): DataFrame = RowFromBytes.columns(operatorOutput, BytesColumn, outputSchema)

  private val reportWidth = outputSchema.length - resultSchema.length
  @transient private lazy val project = ProjectionPool.unsafe(outputSchema)
  @transient private lazy val joined = new JoinedRow

  /** One output row of the operator: `row` (of [[outputSchema]]) as UnsafeRow bytes. */
  private def out(row: InternalRow): Row = Row(UnsafeRowBytes.bytes(project(row)))

  private def watermarkValue(wm: Long): Any = if (wm == HeldWatermark.Undefined) null else wm

  /**
   * An emitted window: `result` has the groupBy().agg() columns; `index` counts its earlier
   * firings (`revision`, or `kw_pane_index` with `pane` when panes are emitted); `retraction`
   * marks a row that withdraws the pane `index` (accumulation='retracting').
   */
  def window(result: InternalRow, pane: Pane, index: Int, retraction: Boolean, watermark: Long): Row = {
    val report = new Array[Any](reportWidth + addedResultColumns)
    if (withRevision) report(0) = index
    if (emission.withPaneColumns) {
      report(0) = pane.utf8
      report(1) = index
    }
    if (emission.retracting) report(2) = retraction
    report(addedResultColumns) = WindowKind
    report(addedResultColumns + 2) = watermarkValue(watermark)
    out(joined(result, new GenericInternalRow(report)))
  }

  private def keyed(key: InternalRow, kind: UTF8String, watermark: Long): Array[Any] = {
    val values = new Array[Any](outputSchema.length)
    var i = 0
    while (i < keyOrdinalsInResult.length) {
      values(keyOrdinalsInResult(i)) = key.get(i, resultSchema(keyOrdinalsInResult(i)).dataType)
      i += 1
    }
    values(resultSchema.length) = kind
    values(resultSchema.length + 2) = watermarkValue(watermark)
    values
  }

  def lateRows(key: InternalRow, lateRows: Long, watermark: Long): Row = {
    val values = keyed(key, LateKind, watermark)
    values(resultSchema.length + 1) = lateRows
    out(new GenericInternalRow(values))
  }

  /** The key's held watermark after a batch whose proposal would have moved it backward. */
  def heldWatermark(key: InternalRow, regressions: Long, watermark: Long): Row = {
    val values = keyed(key, WatermarkKind, watermark)
    values(resultSchema.length + 3) = regressions
    out(new GenericInternalRow(values))
  }

  /**
   * A task's [[KeyTally]] as one "key" row (its bytes), for the per-batch metrics (internal:
   * observed, then dropped; see [[KeyMetricsColumn]]).
   */
  def keyTally(tally: Array[Byte]): Array[Byte] = {
    val values = new Array[Any](outputSchema.length)
    values(resultSchema.length) = KeyKind
    values(outputSchema.length - 1) = tally
    UnsafeRowBytes.bytes(project(new GenericInternalRow(values)))
  }

  /** One kept late row: its original columns, the key's watermark and why it is late. */
  def lateRow(key: InternalRow, original: InternalRow, watermark: Long): Row = {
    val values = keyed(key, LateRowKind, watermark)
    values(resultSchema.length + 4) = original
    values(resultSchema.length + 5) = LateReason
    out(new GenericInternalRow(values))
  }
}

private[keyedwatermarks] object WindowEmitter {
  /**
   * Kept invalid rows (null key, null event time, null source) as report rows of the output
   * schema: `kw_kind = 'invalid_row'`, the key columns, `kw_late_row` and `kw_reason`. They
   * never reach the keyed operator (they have no key or no event time), so they are a
   * branch of their own, united with the operator's output.
   */
  def invalidRows(invalid: DataFrame, emitter: WindowEmitter, keyNames: Seq[String]): DataFrame = {
    val keyIndex = keyNames.zipWithIndex.toMap
    val columns = emitter.outputSchema.fields.toSeq.map { f =>
      val c = keyIndex.get(f.name) match {
        case Some(i) => invalid.col(input.ProjectedInput.keyColumnName(i))
        case None => f.name match {
            case KindColumn => F.lit(Contract.Kinds.InvalidRow)
            case LateRowColumn => invalid.col(input.ProjectedInput.OriginalRow)
            case ReasonColumn => invalid.col(input.ProjectedInput.InvalidReason)
            case _ => F.lit(null)
          }
      }
      c.cast(f.dataType).as(f.name)
    }
    invalid.select(columns: _*)
  }

  /** The operator's own output: one BINARY column, rows of `outputSchema` as UnsafeRow bytes. */
  val BytesColumn = "kw_row"
  val OperatorOutputSchema: StructType = new StructType().add(BytesColumn, BinaryType, nullable = false)

  val KindColumn = Contract.Report.Kind
  val LateRowsColumn = Contract.Report.LateRows
  val WatermarkColumn = Contract.Report.Watermark
  val LateRowColumn = Contract.Report.LateRow
  val ReasonColumn = Contract.Report.Reason
  val RegressionsColumn = Contract.Report.Regressions
  val RevisionColumn = "revision"
  val ReportColumns: Seq[String] = Contract.Report.Columns

  /**
   * Internal, never in a result: on a "key" row (one per task of the operator, after its other
   * rows: see KeyTallyRelay) the task's [[KeyTally]] of the keys it handled, with rows or by a
   * timer, which the per-batch metrics merge.
   */
  val KeyMetricsColumn = "kw_key_metrics"
  val KeyKindValue = "key"
  // Flags of a key handled, for KeyTally.add.
  val HadRows = 1
  val WasNew = 2
  val Released = 4
  private val WindowKind = UTF8String.fromString(Contract.Kinds.Window)
  private val LateKind = UTF8String.fromString(Contract.Kinds.Late)
  private val LateRowKind = UTF8String.fromString(Contract.Kinds.LateRow)
  private val WatermarkKind = UTF8String.fromString(Contract.Kinds.Watermark)
  private val KeyKind = UTF8String.fromString(KeyKindValue)
  private val LateReason = UTF8String.fromString(
    "all windows of the row end at or before its key's watermark at the start of the micro-batch")
}
