package io.github.keyedwatermarks.catalyst

import org.apache.spark.sql.execution.metric.SQLMetric
import org.apache.spark.sql.internal.SQLConf

/**
 * Whether the partial aggregation of the next micro-batch uses Spark's two-level hash map.
 *
 * Grouped by (key, window start), our partial aggregation qualifies for Spark's "fast" first
 * level, a row-based map of `2^spark.sql.codegen.aggregate.fastHashMap.capacityBit` groups
 * (65,536 by default) per task, in front of the `BytesToBytesMap`. Spark's own windowed
 * aggregation never uses it (its window is a struct). With few groups it is the faster map
 * (about 10% at 1k keys, profile.md, session 9); with more groups per task than it holds, every
 * row of a group outside it probes it first (hash, up to two key comparisons, most of them cache
 * misses) and then the second level: at 100k keys, 130k groups per task, the first level was 20%
 * of the CPU (profile.md, session 11). Spark decides once per query from a setting; the number
 * of groups is known only from the batches before, so each micro-batch is planned with the map
 * when the last one had at most that many partials per task.
 */
private[keyedwatermarks] final class TwoLevelMapChoice extends Serializable {
  // Driver only: the last micro-batch's partial count and its number of tasks.
  @transient @volatile private var last: (SQLMetric, Int) = _

  /** Records the partial-count metric of a micro-batch about to run with `tasks` tasks. */
  def record(partials: SQLMetric, tasks: Int): Unit = last = (partials, tasks)

  /** Partials per task in the last micro-batch (None before the first). */
  def partialsPerTask: Option[Long] = Option(last).map { case (m, n) => m.value / math.max(1, n) }

  /** Whether the two-level map is to be used: Spark's setting, unless the last batch outgrew it. */
  def useTwoLevelMap(conf: SQLConf): Boolean =
    conf.enableTwoLevelAggMap && partialsPerTask.forall(_ <= (1L << conf.fastHashAggregateRowMaxCapacityBit))

  // Not part of the plan's identity: a query's plans compare (and are canonicalized) as before.
  override def equals(other: Any): Boolean = other.isInstanceOf[TwoLevelMapChoice]
  override def hashCode: Int = 0
  override def toString: String = "TwoLevelMapChoice"
}
