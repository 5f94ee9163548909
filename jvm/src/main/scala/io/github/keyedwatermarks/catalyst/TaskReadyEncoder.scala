package io.github.keyedwatermarks.catalyst

import java.util.concurrent.ConcurrentHashMap

import scala.util.control.NonFatal

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.analysis.{Analyzer, SimpleAnalyzer}
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder
import org.apache.spark.sql.catalyst.expressions.{
  Attribute, Expression, GenericInternalRow, Projection, UnsafeProjection
}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.types.{ObjectType, StructType}

/**
 * Spark's own row encoder (`Encoders.row(schema)`: the same schema, the same expressions, so the
 * same state schema and the same bytes in state), made ready once instead of in every task.
 *
 * Why: Spark's transformWithState state API sets up its encoders again in every task. Each
 * state variable resolves its value encoder with the analyzer (`resolveAndBind`) and generates a
 * serializer and a deserializer projection; the timer state and every variable do the same with
 * the grouping key's encoder. At 4k-row micro-batches that was about a tenth of ours' CPU
 * (benchmarks/results/batch-phases-2026-12-01.md). Here the analyzer runs once, where the encoder
 * is built, and the projections are lent from task to task ([[ProjectionPool]]).
 *
 * What Spark calls, and what it gets:
 *  - `resolveAndBind()` for the encoder's own schema (what the state API and the timers call):
 *    the encoder bound once; any other attributes or analyzer: Spark's own resolution;
 *  - `createSerializer()` / `createDeserializer()`: Spark's serializer and deserializer over
 *    Spark's own expressions, their projection lent to the task on first use.
 * A copy Spark makes (`copy(...)`) is a plain ExpressionEncoder and behaves as Spark's.
 */
private[keyedwatermarks] final class TaskReadyEncoder[T] private (base: ExpressionEncoder[T], resolved: Boolean)
    extends ExpressionEncoder[T](base.encoder, base.objSerializer, base.objDeserializer) {
  import TaskReadyEncoder._

  // The expressions Spark's createSerializer() / createDeserializer() wrap (optimized), taken once
  // (None: not found, Spark's own serializer or deserializer then).
  private val serializerExpressions: Option[Seq[Expression]] = expressionsOf(super.createSerializer())
  private val deserializerExpressions: Option[Seq[Expression]] =
    if (resolved) expressionsOf(super.createDeserializer()) else None

  /** What resolveAndBind() gives for this encoder's own schema, with Spark's analyzer. */
  private val boundToSchema: ExpressionEncoder[T] =
    if (resolved) this
    else new TaskReadyEncoder(super.resolveAndBind(DataTypeUtils.toAttributes(schema), SimpleAnalyzer), resolved = true)

  override def resolveAndBind(attrs: Seq[Attribute], analyzer: Analyzer): ExpressionEncoder[T] =
    if ((analyzer eq SimpleAnalyzer) && ofSchema(attrs)) boundToSchema else super.resolveAndBind(attrs, analyzer)

  /** Whether binding to `attrs` is binding to the schema: by position, with the same names, types and nullability. */
  private def ofSchema(attrs: Seq[Attribute]): Boolean =
    attrs.length == schema.length && attrs.zip(schema.fields).forall { case (a, f) =>
      a.name == f.name && a.dataType == f.dataType && a.nullable == f.nullable
    }

  override def createSerializer(): ExpressionEncoder.Serializer[T] =
    serializerExpressions.fold(super.createSerializer())(new LentSerializer[T](_))

  override def createDeserializer(): ExpressionEncoder.Deserializer[T] =
    deserializerExpressions.fold(super.createDeserializer())(new LentDeserializer[T](_))
}

private[keyedwatermarks] object TaskReadyEncoder {
  // Built once per JVM and schema: the analyzer runs once, not in every task. Bounded, as a
  // long-lived executor may see many queries.
  private val MaxEntries = 256
  private val rows = new ConcurrentHashMap[StructType, ExpressionEncoder[Row]]()

  /** The encoder of `Encoders.row(schema)`, ready for tasks (built once per JVM and schema). */
  def row(schema: StructType): ExpressionEncoder[Row] = {
    if (rows.size > MaxEntries) rows.clear()
    rows.computeIfAbsent(schema, s => new TaskReadyEncoder(ExpressionEncoder(s), resolved = false))
  }

  /**
   * The expressions of Spark's Serializer or Deserializer: its one constructor argument, a private
   * field (`expressions` on every Spark line 4.0-4.3); None where a line has no such field.
   */
  private def expressionsOf(f: AnyRef): Option[Seq[Expression]] =
    try {
      val field = f.getClass.getDeclaredField("expressions")
      field.setAccessible(true)
      Some(field.get(f).asInstanceOf[Seq[Expression]])
    } catch { case NonFatal(_) => None }

  private val AnyObject = ObjectType(classOf[Any])

  /**
   * Spark's Serializer over the same expressions, with a lent projection. A failure is handed to
   * Spark's own serializer, for Spark's error.
   */
  private final class LentSerializer[T](exprs: Seq[Expression]) extends ExpressionEncoder.Serializer[T](exprs) {
    @transient private[this] var input: GenericInternalRow = _
    @transient private[this] var projection: UnsafeProjection = _

    override def apply(t: T): InternalRow = {
      if (projection == null) {
        input = new GenericInternalRow(1)
        projection = ProjectionPool.unsafe(exprs)
      }
      input(0) = t
      try projection(input)
      catch { case NonFatal(_) => super.apply(t) }
    }
  }

  /** Spark's Deserializer over the same expressions, with a lent projection (errors: as above). */
  private final class LentDeserializer[T](exprs: Seq[Expression]) extends ExpressionEncoder.Deserializer[T](exprs) {
    @transient private[this] var projection: Projection = _

    override def apply(row: InternalRow): T = {
      if (projection == null) projection = ProjectionPool.safe(exprs)
      try projection(row).get(0, AnyObject).asInstanceOf[T]
      catch { case NonFatal(_) => super.apply(row) }
    }
  }
}
