package io.github.keyedwatermarks.planner

import org.apache.spark.sql.catalyst.plans.logical.{
  Aggregate, CollectMetrics, Deduplicate, DeduplicateWithinWatermark, EventTimeWatermark, FlatMapGroupsWithState, Join,
  LogicalPlan, TransformWithState
}

import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.input.InputPlan
import io.github.keyedwatermarks.operator.KeyedWindowProcessor

/**
 * A keyed stage among the other operators of one streaming query (docs/semantics.md, "Keyed
 * stages in a pipeline"): what is upstream of a stage being planned (Spark's global watermark
 * already defined, other keyed stages and their names), and the check that refuses a Spark
 * stateful operator downstream of a keyed stage.
 */
private[keyedwatermarks] object KeyedStages {

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
   * Whether Spark's global watermark is already defined upstream (a `withWatermark`, or an
   * earlier keyed stage's own): the stage then follows that one instead of defining its own,
   * which Spark refuses after a stateful operator ("Redefining watermark is disallowed").
   */
  def watermarkUpstream(input: LogicalPlan): Boolean = input.exists(_.isInstanceOf[EventTimeWatermark])

  /** Whether a stateful operator (Spark's or a keyed stage) is upstream. */
  def statefulUpstream(input: LogicalPlan): Boolean = input.exists(p => isKeyedStage(p) || sparkStateful(p).isDefined)

  /** The names of the keyed stages upstream ("" for an unnamed one), from their input metrics. */
  def stageNamesUpstream(input: LogicalPlan): Seq[String] = input.collect {
    case c: CollectMetrics if c.name == InputPlan.InputMetrics => ""
    case c: CollectMetrics if c.name.startsWith(InputPlan.InputMetrics + StageSeparator) =>
      c.name.stripPrefix(InputPlan.InputMetrics + StageSeparator)
  }

  val StageSeparator: String = Contract.StageSeparator

  /** The observed-metrics name of a stage ("" is the unnamed stage: the name alone). */
  def metricsName(base: String, stage: String): String = if (stage.isEmpty) base else base + StageSeparator + stage

  /**
   * The stage's name: the one given, or "" (the metrics' plain names, as before stages had
   * names) for the first keyed stage of a query, else its key columns joined with "_".
   * A name an upstream stage already has is refused (Spark would fail the query with
   * DUPLICATED_METRICS_NAME when it starts).
   */
  def stageName(chosen: Option[String], keys: Seq[String], input: LogicalPlan): String = {
    chosen.foreach { n =>
      if (n.isEmpty || !n.forall(c => c.isLetterOrDigit || c == '_')) throw new IllegalArgumentException(
        s"name: a keyed stage's name is letters, digits and '_' (it names the stage's metrics), got '$n'")
    }
    val taken = stageNamesUpstream(input)
    val name = chosen.getOrElse(if (taken.isEmpty) "" else keys.mkString("_"))
    if (taken.contains(name)) throw new IllegalArgumentException(
      s"name: a keyed stage upstream is already named '$name' (its metrics are " +
        s"'${metricsName(InputPlan.InputMetrics, name)}'); give this stage another name=")
    name
  }

  /**
   * While a keyed stage is planned, its reference aggregation (Spark's own groupBy over the
   * stage's input, which is only analyzed, never run) may sit on another keyed stage:
   * [[AfterKeyedStage]] lets it through.
   */
  private val planning = new ThreadLocal[Boolean] { override def initialValue(): Boolean = false }

  def whilePlanning[T](body: => T): T = {
    val before = planning.get()
    planning.set(true)
    try body
    finally planning.set(before)
  }

  /**
   * A check rule (installed by `KeyedWatermarksExtensions`): a Spark stateful operator, or a
   * `withWatermark`, downstream of a keyed stage is refused when the DataFrame is built, before
   * any query starts. Spark would either refuse it when the query starts (an aggregation in
   * append mode without a watermark, a watermark redefined after a stateful operator) or
   * close it on its one global watermark, dropping the windows of slow keys that the keyed
   * stage kept: the keyed alternative is another keyed stage (`kw.rollup`).
   */
  object AfterKeyedStage extends (LogicalPlan => Unit) {
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
}
