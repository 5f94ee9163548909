package io.github.keyedwatermarks

import org.apache.spark.sql.SparkSessionExtensions

import io.github.keyedwatermarks.planner.{KeyedStages, KeyedStrategies, OutputModeCheck, StageRecordCheck}

/**
 * Registers the planner strategies of our plan nodes (planner.KeyedStrategies) with Spark, as Delta registers
 * its own: `spark.sql.extensions=io.github.keyedwatermarks.KeyedWatermarksExtensions`
 * (its name is `contract.Contract.ExtensionsClass`)
 * (`keyed_watermarks.configure(builder)` sets it), and the check that refuses Spark's stateful
 * operators after a keyed stage (planner.KeyedStages.AfterKeyedStage), the check of a
 * restarted query against its checkpoint's record (planner.StageRecordCheck), and the rule that
 * refuses outputMode("complete") for a keyed query (planner.OutputModeCheck). A session without it gets the strategies
 * added to its `experimental.extraStrategies` when the first keyed query is planned.
 */
class KeyedWatermarksExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    KeyedStrategies.all.foreach(s => extensions.injectPlannerStrategy(_ => s))
    // Refuses a Spark stateful operator after a keyed stage when the DataFrame is built.
    extensions.injectCheckRule(_ => KeyedStages.AfterKeyedStage)
    // Refuses a restart with an incompatible query before its first micro-batch runs.
    extensions.injectColumnar(session => new StageRecordCheck(session))
    // Refuses outputMode("complete") for a keyed query when it starts, before Spark's own check.
    extensions.injectHintResolutionRule(_ => OutputModeCheck)
  }
}
