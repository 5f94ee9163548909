package io.github.keyedwatermarks.planner

import org.apache.spark.sql.catalyst.plans.logical.{CollectMetrics, EventTimeWatermark, LogicalPlan}

import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.input.InputPlan
import io.github.keyedwatermarks.hooks.AfterKeyedStageCheck.{isKeyedStage, sparkStateful}

/**
 * A keyed stage among the other operators of one streaming query (docs/semantics.md, "Keyed
 * stages in a pipeline"): what is upstream of a stage being planned (Spark's global watermark
 * already defined, other keyed stages and their names). (The check that refuses a Spark stateful
 * operator downstream of a keyed stage is a Spark hook: hooks.AfterKeyedStageCheck.)
 */
private[keyedwatermarks] object KeyedStages {

  /**
   * Whether Spark's global watermark is already defined upstream (a `withWatermark`, or an
   * earlier keyed stage's own): the stage then follows that one instead of defining its own,
   * which Spark refuses after a stateful operator ("Redefining watermark is disallowed").
   */
  def watermarkUpstream(input: LogicalPlan): Boolean = input.exists(_.isInstanceOf[EventTimeWatermark])

  /** Whether a stateful operator (Spark's or a keyed stage) is upstream. */
  def statefulUpstream(input: LogicalPlan): Boolean = input.exists(p => isKeyedStage(p) || sparkStateful(p).isDefined)

  /**
   * The names of the stages upstream ("" for an unnamed one) whose metrics are named after
   * `base`: the keyed stages by their input metrics, the joins by theirs.
   */
  def stageNamesUpstream(input: LogicalPlan, base: String = InputPlan.InputMetrics): Seq[String] = input.collect {
    case c: CollectMetrics if c.name == base => ""
    case c: CollectMetrics if c.name.startsWith(base + StageSeparator) => c.name.stripPrefix(base + StageSeparator)
  }

  val StageSeparator: String = Contract.StageSeparator

  /** The observed-metrics name of a stage ("" is the unnamed stage: the name alone). */
  def metricsName(base: String, stage: String): String = if (stage.isEmpty) base else base + StageSeparator + stage

  /**
   * The stage's name: the one given, or "" (the metrics' plain names, as before stages had
   * names) for the first keyed stage of a query, else its key columns joined with "_".
   * A name an upstream stage already has is refused (Spark would fail the query with
   * DUPLICATED_METRICS_NAME when it starts). The joins name theirs the same way (`base` their
   * metrics' name, `what` "join").
   */
  def stageName(chosen: Option[String], keys: Seq[String], input: LogicalPlan,
      base: String = InputPlan.InputMetrics, what: String = "keyed stage"): String = {
    chosen.foreach { n =>
      if (n.isEmpty || !n.forall(c => c.isLetterOrDigit || c == '_')) throw new IllegalArgumentException(
        s"name: a $what's name is letters, digits and '_' (it names the $what's metrics), got '$n'")
    }
    val taken = stageNamesUpstream(input, base)
    val name = chosen.getOrElse(if (taken.isEmpty) "" else keys.mkString("_"))
    if (taken.contains(name)) throw new IllegalArgumentException(
      s"name: a $what upstream is already named '$name' (its metrics are " +
        s"'${metricsName(base, name)}'); give this $what another name=")
    name
  }
}
