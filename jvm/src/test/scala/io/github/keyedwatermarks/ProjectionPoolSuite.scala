package io.github.keyedwatermarks

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Add, BoundReference, Literal, Rand}
import org.apache.spark.sql.types.{LongType, StructField, StructType}

import io.github.keyedwatermarks.catalyst.ProjectionPool

/**
 * catalyst.ProjectionPool on real tasks (local[2]): a projection is lent to one user at a
 * time, comes back when its task completes, and the next task gets it instead of a new one.
 */
class ProjectionPoolSuite extends SparkSuite {
  override protected def runsQueries: Boolean = false

  private val schema = StructType(Seq(StructField("a", LongType), StructField("b", LongType)))
  // Expressions of this suite only: the pool is the JVM's, shared with every other suite.
  private val ownExpressions = Seq(Add(BoundReference(0, LongType, nullable = true), Literal(987654321L)))

  /** Per task of a job of `tasks` tasks: the identities of what `borrow` returned, twice. */
  private def lent(borrow: () => AnyRef, tasks: Int = 2): Seq[(Int, Int)] =
    spark.sparkContext.parallelize(0 until tasks, tasks).mapPartitions { _ =>
      val first = borrow()
      val second = borrow()
      Iterator.single((System.identityHashCode(first), System.identityHashCode(second)))
    }.collect().toSeq

  test("two users in one task get two projections; the next task gets the same two back") {
    val own = ownExpressions
    val borrow = () => ProjectionPool.unsafe(own)
    val (a, b) = lent(borrow, tasks = 1).head
    assert(a != b, "one projection lent twice in a task")
    // Given back when the task completed: the pool holds exactly these two for the expressions.
    val (c, d) = lent(borrow, tasks = 1).head
    assert(Set(c, d) == Set(a, b))
    // Tasks running side by side never hold the same projection.
    lent(borrow).foreach { case (x, y) => assert(x != y) }
  }

  test("a lent projection computes what Spark's would, and its output row stays its user's for the task") {
    val plusOne = Seq(Add(BoundReference(0, LongType, nullable = true), Literal(1L)))
    val out = spark.sparkContext.parallelize(Seq(1L, 2L, 3L), 1).mapPartitions { values =>
      val p = ProjectionPool.unsafe(plusOne)
      val q = ProjectionPool.unsafe(plusOne)
      values.map { v =>
        val r = p(InternalRow(v))
        q(InternalRow(100L * v)) // a second user of the same expressions does not overwrite r
        r.getLong(0)
      }
    }.collect().toSeq
    assert(out == Seq(2L, 3L, 4L))
  }

  test("projections of nondeterministic expressions are never pooled") {
    val random = Seq(Rand(Literal(7L)))
    val borrow = () => ProjectionPool.unsafe(random)
    val before = lent(borrow).flatMap { case (a, b) => Seq(a, b) }.toSet
    val after = lent(borrow).flatMap { case (a, b) => Seq(a, b) }.toSet
    assert((before intersect after).isEmpty)
  }

  test("outside a task (the driver) every call creates a projection") {
    assert(ProjectionPool.unsafe(schema) ne ProjectionPool.unsafe(schema))
  }
}
