package io.github.keyedwatermarks.emission

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, JoinedRow}
import org.apache.spark.sql.types.{LongType, StringType, StructType, TimestampType}
import org.apache.spark.unsafe.types.UTF8String

import io.github.keyedwatermarks.compat.SparkInternals.RowConverter
import io.github.keyedwatermarks.watermark.KeyWatermark

/**
 * Builds the operator's output rows. The operator emits the result columns (exactly those of
 * `groupBy(keys, window).agg(...)`) followed by three report columns:
 *  - `kw_kind`: "window" for an emitted window, "late" for a per-key, per-batch late-row count;
 *  - `kw_late_rows`: number of late rows of the key in this batch (late rows only);
 *  - `kw_watermark`: the key's watermark at the start of the batch (null if undefined).
 * The public `agg()` keeps only the window rows and drops the report columns.
 */
final class WindowEmitter(val resultSchema: StructType, keyOrdinalsInResult: Array[Int]) extends Serializable {
  import WindowEmitter._

  val outputSchema: StructType = resultSchema
    .add(KindColumn, StringType, nullable = false)
    .add(LateRowsColumn, LongType, nullable = true)
    .add(WatermarkColumn, TimestampType, nullable = true)

  private val converter = new RowConverter(outputSchema)
  @transient private lazy val joined = new JoinedRow

  private def watermarkValue(wm: Long): Any = if (wm == KeyWatermark.Undefined) null else wm

  def window(result: InternalRow, watermark: Long): Row = {
    val report = new GenericInternalRow(Array[Any](WindowKind, null, watermarkValue(watermark)))
    converter.toExternal(joined(result, report))
  }

  def lateRows(key: InternalRow, lateRows: Long, watermark: Long): Row = {
    val values = new Array[Any](outputSchema.length)
    var i = 0
    while (i < keyOrdinalsInResult.length) {
      values(keyOrdinalsInResult(i)) = key.get(i, resultSchema(keyOrdinalsInResult(i)).dataType)
      i += 1
    }
    values(resultSchema.length) = LateKind
    values(resultSchema.length + 1) = lateRows
    values(resultSchema.length + 2) = watermarkValue(watermark)
    converter.toExternal(new GenericInternalRow(values))
  }
}

object WindowEmitter {
  val KindColumn = "kw_kind"
  val LateRowsColumn = "kw_late_rows"
  val WatermarkColumn = "kw_watermark"
  val ReportColumns: Seq[String] = Seq(KindColumn, LateRowsColumn, WatermarkColumn)
  private val WindowKind = UTF8String.fromString("window")
  private val LateKind = UTF8String.fromString("late")
}
