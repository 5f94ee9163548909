package io.github.keyedwatermarks

import org.apache.spark.sql.SparkSessionExtensions

import io.github.keyedwatermarks.partials.KeyedPartialAggregateStrategy

/**
 * Registers the planner strategy of the partial aggregation with Spark, as Delta registers
 * its own: `spark.sql.extensions=io.github.keyedwatermarks.KeyedWatermarksExtensions`
 * (its name is `contract.Contract.ExtensionsClass`)
 * (`keyed_watermarks.configure(builder)` sets it). A session without it gets the strategy added
 * to its `experimental.extraStrategies` when the first keyed query is planned.
 */
class KeyedWatermarksExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit =
    extensions.injectPlannerStrategy(_ => KeyedPartialAggregateStrategy)
}
