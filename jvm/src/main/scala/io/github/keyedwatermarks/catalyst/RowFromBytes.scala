package io.github.keyedwatermarks.catalyst

import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Expression, GetStructField, UnaryExpression}
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

  /**
   * The columns of `schema` (names, types, nullability and metadata) from `frame`'s BINARY
   * column `bytes`, whose values are rows of `schema` as UnsafeRow bytes: one Project of a field
   * of the row each, so that the plan gains one node, not two (a micro-batch's analyzed plan is
   * optimized and planned again in every micro-batch, each node at a cost). The row read in
   * place is one subexpression, which Spark's Project evaluates once per row.
   */
  def columns(frame: DataFrame, bytes: String, schema: StructType): DataFrame = {
    require(frame.schema(bytes).dataType == BinaryType, s"$bytes: expected BINARY, got ${frame.schema(bytes).dataType}")
    val row = RowFromBytes(SparkBridge.expression(frame.col(bytes)), schema)
    frame.select(schema.fields.toSeq.zipWithIndex.map { case (f, i) =>
      SparkBridge.column(GetStructField(row, i, Some(f.name))).as(f.name, f.metadata)
    }: _*)
  }
}
