package io.github.keyedwatermarks.planner

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.SparkStrategy

import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.emission.KeyTallyRelayStrategy
import io.github.keyedwatermarks.partials.KeyedPartialAggregateStrategy

/** The planner strategies of our own plan nodes: the partial aggregation and the key tally's relay. */
private[keyedwatermarks] object KeyedStrategies {
  val all: Seq[SparkStrategy] = Seq(KeyedPartialAggregateStrategy, KeyTallyRelayStrategy)

  /** The strategies, unless the session has them from `spark.sql.extensions` (Contract.ExtensionsClass). */
  def install(session: SparkSession): Unit = synchronized {
    val experimental = session.experimental
    val extensions = session.conf.getOption("spark.sql.extensions").getOrElse("")
    if (!extensions.split(",").map(_.trim).contains(Contract.ExtensionsClass)) {
      val missing = all.filterNot(experimental.extraStrategies.contains)
      if (missing.nonEmpty) experimental.extraStrategies = experimental.extraStrategies ++ missing
    }
  }
}
