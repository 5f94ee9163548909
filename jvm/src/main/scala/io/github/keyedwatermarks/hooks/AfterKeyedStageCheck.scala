package io.github.keyedwatermarks.hooks

import org.apache.spark.sql.catalyst.plans.logical.{
  Aggregate, Deduplicate, DeduplicateWithinWatermark, EventTimeWatermark, FlatMapGroupsWithState, Join, LogicalPlan,
  TransformWithState
}

import io.github.keyedwatermarks.operator.KeyedWindowProcessor

/**
 * A check rule ([[SparkHooks]]): a Spark stateful operator, or a `withWatermark`, downstream of
 * a keyed stage is refused when the DataFrame is built, before any query starts. Spark would
 * either refuse it when the query starts (an aggregation in append mode without a watermark, a
 * watermark redefined after a stateful operator) or close it on its one global watermark,
 * dropping the windows of slow keys that the keyed stage kept: the keyed alternative is another
 * keyed stage (`kw.rollup`).
 */
private[keyedwatermarks] object AfterKeyedStageCheck extends (LogicalPlan => Unit) {

  /** Whether `p` is a keyed stage's operator (our transformWithState). */
  def isKeyedStage(p: LogicalPlan): Boolean = p match {
    case t: TransformWithState => t.statefulProcessor.isInstanceOf[KeyedWindowProcessor]
    case _ => false
  }

  /**
   * Spark's stateful operators (and `withWatermark`, which Spark refuses after any stateful
   * operator), named as a user wrote them, or None.
   */
  def sparkStateful(p: LogicalPlan): Option[String] = p match {
    case a: Aggregate if a.isStreaming => Some("a streaming aggregation (groupBy().agg())")
    case d: Deduplicate if d.isStreaming => Some("dropDuplicates")
    case d: DeduplicateWithinWatermark if d.isStreaming => Some("dropDuplicatesWithinWatermark")
    case j: Join if j.left.isStreaming && j.right.isStreaming => Some("a stream-stream join")
    case f: FlatMapGroupsWithState if f.isStreaming => Some("(flat)mapGroupsWithState")
    case t: TransformWithState if t.isStreaming && !isKeyedStage(t) => Some("transformWithState")
    case _: EventTimeWatermark => Some("withWatermark")
    case _ => None
  }

  /**
   * While a keyed stage is planned, its reference aggregation (Spark's own groupBy over the
   * stage's input, which is only analyzed, never run) may sit on another keyed stage: the check
   * lets it through.
   */
  private val planning = new ThreadLocal[Boolean] { override def initialValue(): Boolean = false }

  def whilePlanning[T](body: => T): T = {
    val before = planning.get()
    planning.set(true)
    try body
    finally planning.set(before)
  }

  override def apply(plan: LogicalPlan): Unit = if (!planning.get()) plan.foreach { node =>
    sparkStateful(node).foreach { what =>
      if (node.children.exists(_.exists(isKeyedStage))) throw new IllegalArgumentException(
        s"$what after a keyed stage (keyed_watermark(...).agg(...)) is not supported: Spark's stateful " +
          "operators follow one global watermark, which would drop the windows of the keys the keyed stage " +
          "kept (or Spark refuses it when the query starts). Aggregate its output with another keyed " +
          "stage instead: kw.rollup(windows, key=..., ...) or kw.keyed_watermark(windows, key=..., " +
          "event_time=..., source=...) (docs/semantics.md, \"Keyed stages in a pipeline\"); stateless " +
          "operators, joins with static tables and sinks are fine")
    }
  }
}
