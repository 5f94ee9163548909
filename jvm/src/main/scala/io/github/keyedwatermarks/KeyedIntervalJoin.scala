package io.github.keyedwatermarks

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.DataFrame

import io.github.keyedwatermarks.join.IntervalJoinPlan

/**
 * The Scala API of the keyed interval join (docs/semantics.md, "Interval join"): each left row
 * joined to the right rows of its key whose time is at most `before` before and at most
 * `after` after its own; each side of a key has its own watermark (its max time - `lateness`),
 * which decides its late rows and when the other side's rows leave the state. `how` is
 * `"inner"` or `"left_outer"`. `name` names the join's metrics (`keyed_watermarks_join.<name>`;
 * docs/joins.md, "Metrics"). Bad input fails here, before any query starts.
 *
 * {{{
 * import io.github.keyedwatermarks.KeyedIntervalJoin
 * val joined = KeyedIntervalJoin(readings, alarms, Seq("device"), "ts", "raised_at",
 *   before = "1 minute", after = "5 minutes", lateness = "30 seconds", how = "left_outer")
 * }}}
 */
object KeyedIntervalJoin {
  def apply(left: DataFrame, right: DataFrame, keys: Seq[String], leftTime: String, rightTime: String,
      before: String, after: String, lateness: String, how: String, name: Option[String] = None): DataFrame =
    IntervalJoinPlan.plan(left, right, keys, leftTime, rightTime, before, after, lateness, how, name)

  /** The same, for py4j (a Java list of key names; `name` null for none). */
  def fromPython(left: DataFrame, right: DataFrame, keys: java.util.List[String], leftTime: String,
      rightTime: String, before: String, after: String, lateness: String, how: String, name: String): DataFrame =
    apply(left, right, keys.asScala.toSeq, leftTime, rightTime, before, after, lateness, how, Option(name))
}
