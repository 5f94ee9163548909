package io.github.keyedwatermarks.catalyst

import org.apache.spark.sql.Column
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{CurrentBatchTimestamp, Expression, UnaryExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{
  CodegenContext, CodeGenerator, ExprCode, FalseLiteral, JavaCode, TrueLiteral
}
import org.apache.spark.sql.catalyst.expressions.codegen.Block._
import org.apache.spark.sql.keyedwatermarks.SparkBridge

/**
 * A value that is constant within one micro-batch but changes between batches (the batch's
 * processing time plus `max_ahead`), kept out of the generated Java source.
 *
 * Why: a streaming query replaces `current_timestamp()` by the batch's timestamp as a literal,
 * and whole-stage code generation writes a primitive literal into the source. Every
 * micro-batch then had new source for each stage that read it, so Spark's code cache missed
 * and Janino compiled again, every batch (benchmarks/results/profile.md). Here the value is a reference object of the
 * generated class, as Spark does for non-primitive literals, so the source, and the cache key,
 * stay the same from batch to batch.
 *
 * Not foldable, or constant folding would turn it back into a literal. Its child is evaluated
 * once, when the code is generated. By then the streaming engine has replaced
 * `current_timestamp()` by `CurrentBatchTimestamp`, which is `Nondeterministic` and so never
 * foldable: generated as is, it ran through `CodegenFallback` for every row (the interpreted
 * expression, a new Literal per call, and a nondeterministic expression in the scan's
 * projection). It is read here as the literal it stands for. A child that still reads a column
 * or another nondeterministic expression is generated as is.
 */
private[keyedwatermarks] final case class BatchConstant(child: Expression) extends UnaryExpression {
  override def foldable: Boolean = false
  override def dataType = child.dataType
  override def nullable: Boolean = child.nullable
  override def eval(input: InternalRow): Any = ofBatch.fold(child.eval(input))(_.eval(null))

  /** The child with the batch's timestamp as a literal, when that leaves a constant of the batch. */
  @transient private lazy val ofBatch: Option[Expression] = {
    val literal = child.transformUp { case t: CurrentBatchTimestamp => t.toLiteral }
    if (literal.foldable) Some(literal) else None
  }

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = ofBatch match {
    case None => child.genCode(ctx)
    case Some(constant) => constant.eval(null) match {
        case null => ev.copy(code = code"", isNull = TrueLiteral, value = JavaCode.defaultLiteral(dataType))
        case value =>
          val ref = ctx.addReferenceObj("kwBatchConstant", value, CodeGenerator.boxedType(dataType))
          ev.copy(
            code = code"${CodeGenerator.javaType(dataType)} ${ev.value} = $ref;",
            isNull = FalseLiteral)
      }
  }

  override protected def withNewChildInternal(newChild: Expression): BatchConstant = copy(child = newChild)
}

private[keyedwatermarks] object BatchConstant {
  /** `column`, constant within a micro-batch, kept out of the generated source. */
  def apply(column: Column): Column = SparkBridge.column(BatchConstant(SparkBridge.expression(column)))
}
