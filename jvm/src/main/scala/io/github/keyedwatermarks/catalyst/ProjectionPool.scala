package io.github.keyedwatermarks.catalyst

import java.util.concurrent.{ConcurrentHashMap, ConcurrentLinkedQueue}

import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.expressions.{
  Attribute, AttributeSeq, BindReferences, BoundReference, Expression, MutableProjection, Projection, SafeProjection,
  UnsafeProjection
}
import org.apache.spark.sql.types.StructType

/**
 * Generated projections lent to tasks, instead of generated in every task.
 *
 * Spark compiles a projection's class once per JVM (its compile cache), but writes the class's
 * Java source again for every projection it creates, and our operator and plan nodes create
 * theirs in every task. At 4k-row micro-batches that was about 5% of ours' CPU
 * (benchmarks/results/batch-phases-2026-11-29.md). A projection is lent to one task at a
 * time: taken from the pool (or created when none is free) and given back when the task
 * completes. So two users never share one, even within a task, and a user may keep the
 * projection's reused output row until its task ends.
 *
 * What a borrower must do: set a MutableProjection's target before each use (it keeps the
 * last one). Expressions that are not deterministic are never pooled (Spark initializes them
 * per partition). Outside a task (on the driver) every call creates a new projection.
 */
private[keyedwatermarks] object ProjectionPool {
  private sealed trait Kind
  private case object Unsafe extends Kind
  private case object Mutable extends Kind
  private case object Safe extends Kind

  // Bound expressions (positions, not attribute ids) are the key, so every task of a plan, and
  // every micro-batch, finds the same entry. Bounded: a long-lived executor may see many plans.
  private val MaxEntries = 512
  private val free = new ConcurrentHashMap[(Kind, Seq[Expression]), ConcurrentLinkedQueue[AnyRef]]()

  /** An UnsafeProjection of bound expressions. */
  def unsafe(bound: Seq[Expression]): UnsafeProjection = lend(Unsafe, bound)(UnsafeProjection.create(bound))

  def unsafe(exprs: Seq[Expression], input: Seq[Attribute]): UnsafeProjection = unsafe(bind(exprs, input))

  /** An UnsafeProjection of rows of `schema` (as Spark's UnsafeProjection.create(schema)). */
  def unsafe(schema: StructType): UnsafeProjection =
    unsafe(schema.fields.toSeq.zipWithIndex.map { case (f, i) => BoundReference(i, f.dataType, nullable = true) })

  /** A SafeProjection of bound expressions (Spark's encoders' deserializers: catalyst.TaskReadyEncoder). */
  def safe(bound: Seq[Expression]): Projection = lend(Safe, bound)(SafeProjection.create(bound))

  /** A MutableProjection; set its target before each use. */
  def mutable(exprs: Seq[Expression], input: Seq[Attribute]): MutableProjection = {
    val bound = bind(exprs, input)
    lend(Mutable, bound)(MutableProjection.create(bound))
  }

  private def bind(exprs: Seq[Expression], input: Seq[Attribute]): Seq[Expression] =
    BindReferences.bindReferences(exprs, new AttributeSeq(input))

  private def lend[P <: AnyRef](kind: Kind, bound: Seq[Expression])(create: => P): P = {
    val task = TaskContext.get()
    if (task == null || !bound.forall(_.deterministic)) create
    else {
      if (free.size > MaxEntries) free.clear()
      val queue = free.computeIfAbsent((kind, bound), _ => new ConcurrentLinkedQueue[AnyRef]())
      val p = Option(queue.poll()).fold(create)(_.asInstanceOf[P])
      task.addTaskCompletionListener[Unit](_ => queue.offer(p))
      p
    }
  }
}
