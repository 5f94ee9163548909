package io.github.keyedwatermarks.catalyst

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Expression, UnaryExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodegenContext, ExprCode}
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{BinaryType, DataType, StructType}

/**
 * A row of `schema` over BINARY bytes in Spark's UnsafeRow format ([[UnsafeRowBytes]]): reads
 * the struct in place, without a copy or a conversion per field. The bytes must come from an
 * UnsafeProjection of exactly `schema` (the operator's own output; nothing a user supplies).
 */
private[keyedwatermarks] final case class RowFromBytes(child: Expression, schema: StructType) extends UnaryExpression {

  override def dataType: DataType = schema
  override def nullable: Boolean = child.nullable
  override def prettyName: String = "kw_row_from_bytes"

  override protected def nullSafeEval(bytes: Any): Any =
    UnsafeRowBytes.row(bytes.asInstanceOf[Array[Byte]], schema.length)

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode =
    nullSafeCodeGen(ctx, ev,
      bytes =>
        s"""${ev.value} = new org.apache.spark.sql.catalyst.expressions.UnsafeRow(${schema.length});
         |((org.apache.spark.sql.catalyst.expressions.UnsafeRow) ${ev.value}).pointTo($bytes, $bytes.length);
         |""".stripMargin)

  override protected def withNewChildInternal(newChild: Expression): RowFromBytes = copy(child = newChild)
}

private[keyedwatermarks] object RowFromBytes {
  private val Decoded = "kw_decoded_row"

  /**
   * The columns of `schema` (names, types, nullability and metadata) from `frame`'s BINARY
   * column `bytes`, whose values are rows of `schema` as UnsafeRow bytes.
   */
  def columns(frame: DataFrame, bytes: String, schema: StructType): DataFrame = {
    require(frame.schema(bytes).dataType == BinaryType, s"$bytes: expected BINARY, got ${frame.schema(bytes).dataType}")
    val decoded = frame.select(SparkBridge.column(RowFromBytes(SparkBridge.expression(frame.col(bytes)), schema))
        .as(Decoded))
    val row = decoded.col(Decoded)
    decoded.select(schema.fields.toSeq.map(f => row.getField(f.name).as(f.name, f.metadata)): _*)
  }
}
