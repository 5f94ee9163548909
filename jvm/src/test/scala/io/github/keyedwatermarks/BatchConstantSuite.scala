package io.github.keyedwatermarks

import org.apache.spark.sql.catalyst.expressions.{
  Add, BoundReference, CurrentBatchTimestamp, Expression, GreaterThan, Literal, UnixMicros
}
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenContext
import org.apache.spark.sql.types.{LongType, TimestampType}
import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.catalyst.BatchConstant

/**
 * max_ahead's threshold, `unix_micros(current_timestamp()) + max_ahead`, as the streaming engine
 * hands it to code generation: `current_timestamp()` replaced by `CurrentBatchTimestamp`, which
 * is Nondeterministic and never foldable. The threshold must be one value per batch held out of
 * the source, not an interpreted expression evaluated per row.
 */
class BatchConstantSuite extends AnyFunSuite {
  private val maxAhead = 86400000000L

  private def threshold(batchMs: Long): Expression =
    BatchConstant(Add(UnixMicros(CurrentBatchTimestamp(batchMs, TimestampType, Some("UTC"))), Literal(maxAhead)))

  private def generated(e: Expression): (String, Seq[AnyRef]) = {
    val ctx = new CodegenContext
    val ev = e.genCode(ctx)
    (ev.code.toString + ev.value.toString, ctx.references.toSeq.map(_.asInstanceOf[AnyRef]))
  }

  test("the batch's timestamp is one value per batch, the same source for every batch") {
    val (first, firstRefs) = generated(threshold(1000L))
    val (second, secondRefs) = generated(threshold(2000L))
    assert(first == second, "a new batch timestamp must not change the generated source")
    assert(firstRefs == Seq(java.lang.Long.valueOf(1000L * 1000 + maxAhead)))
    assert(secondRefs == Seq(java.lang.Long.valueOf(2000L * 1000 + maxAhead)))
    // Nothing is left to evaluate per row: no expression object among the references
    // (CodegenFallback would pass the expression itself and call its eval for every row).
    assert(!firstRefs.exists(_.isInstanceOf[Expression]))
    assert(threshold(1000L).eval(null) == 1000L * 1000 + maxAhead)
  }

  test("a child that reads a column is generated as is, per row") {
    val ts = BoundReference(0, LongType, nullable = false)
    val perRow = BatchConstant(GreaterThan(ts, Literal(5L)))
    val ctx = new CodegenContext
    ctx.INPUT_ROW = "i"
    val code = perRow.genCode(ctx).code.toString
    assert(!ctx.references.exists(_.isInstanceOf[java.lang.Long]))
    assert(code.contains("i.getLong(0)"), code)
  }
}
