package io.github.keyedwatermarks

import org.apache.spark.sql.SparkSessionExtensions

import io.github.keyedwatermarks.hooks.SparkHooks

/**
 * Installs keyed-watermarks' hooks into Spark's planning (the list: hooks.SparkHooks), as Delta
 * registers its own: `spark.sql.extensions=io.github.keyedwatermarks.KeyedWatermarksExtensions`
 * (its name is `contract.Contract.ExtensionsClass`; `keyed_watermarks.configure(builder)` sets
 * it). A keyed query in a session without it is refused, saying how to enable it.
 */
class KeyedWatermarksExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = SparkHooks.install(extensions)
}
