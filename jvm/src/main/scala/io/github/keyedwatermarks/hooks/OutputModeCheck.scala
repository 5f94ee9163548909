package io.github.keyedwatermarks.hooks

import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, TransformWithState}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.streaming.WriteToStreamStatement
import org.apache.spark.sql.streaming.OutputMode

import io.github.keyedwatermarks.operator.KeyedWindowProcessor

/**
 * Refuses, when the query starts, a keyed stage not planned for real-time mode under
 * `trigger(realTime=...)` (option `real_time`: Spark's own refusal would name our partial
 * aggregation's nodes), and `outputMode("complete")` for a query with a keyed stage, naming the option, when the
 * query starts (before any micro-batch): the keyed result is no streaming aggregation Spark
 * could re-emit whole, and Spark's own refusal says only that complete mode needs one.
 *
 * A rule of the analyzer's hint batch (installed by [[SparkHooks]]) because that
 * batch runs before the resolution batch, whose `ResolveWriteToStream` applies Spark's check
 * to the same `WriteToStreamStatement`; a check rule would run after it. It only looks at the
 * root of each plan and never changes it.
 */
private[keyedwatermarks] object OutputModeCheck extends Rule[LogicalPlan] {
  /**
   * Spark's real-time trigger (4.1 and later), known by its name on every line: 4.0's statement
   * has no trigger field (and no real-time mode).
   */
  def realTimeTrigger(w: WriteToStreamStatement): Boolean = w.productElementNames.zip(w.productIterator).exists {
    case (name, value) =>
      name == "trigger" && value != null && value.getClass.getSimpleName.startsWith("RealTimeTrigger")
  }

  override def apply(plan: LogicalPlan): LogicalPlan = {
    plan match {
      case w: WriteToStreamStatement
          if w.outputMode == OutputMode.Complete() && w.inputQuery.exists(AfterKeyedStageCheck.isKeyedStage) =>
        throw new IllegalArgumentException(
          "outputMode: 'complete' is not supported for a keyed query (keyed_watermark(...).agg(...)): its " +
            "result is no streaming aggregation Spark could re-emit whole in every micro-batch. Use " +
            "outputMode('append') (the default) or outputMode('update'); for results before a window closes, " +
            "emit='every_batch' (docs/semantics.md, \"Panes and accumulation\")")
      case w: WriteToStreamStatement if OutputModeCheck.realTimeTrigger(w) =>
        val stages = w.inputQuery.collect {
          case t: TransformWithState if AfterKeyedStageCheck.isKeyedStage(t) =>
            t.statefulProcessor.asInstanceOf[KeyedWindowProcessor]
        }
        if (stages.exists(!_.perRow)) throw new IllegalArgumentException(
          "trigger(realTime=...): a keyed stage runs in Spark's real-time mode only when it is planned for it, " +
            "without the partial aggregation Spark does not allow there: set real_time=True in " +
            "keyed_watermark(...) (docs/semantics.md, \"Real-time mode\")")
      case _ => ()
    }
    plan
  }
}
