package io.github.keyedwatermarks.hooks

import java.util.{Collections, WeakHashMap}

import org.apache.spark.sql.{SparkSession, SparkSessionExtensions}
import org.apache.spark.sql.execution.SparkStrategy

import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.catalyst.OnePassMetricsStrategy
import io.github.keyedwatermarks.emission.KeyTallyRelayStrategy
import io.github.keyedwatermarks.partials.KeyedPartialAggregateStrategy

/**
 * Every place where keyed-watermarks hooks into Spark's own planning, and their one install
 * path (`spark.sql.extensions=io.github.keyedwatermarks.KeyedWatermarksExtensions`, which
 * `keyed_watermarks.configure(builder)` sets). Behaviour that does not start from a keyed
 * query's own call is here:
 *
 *  - planner strategies of our two logical nodes (partials.KeyedPartialAggregateStrategy,
 *    emission.KeyTallyRelayStrategy), and of observations made of one tally's fields, the
 *    input and output metrics (catalyst.OnePassMetricsStrategy: one pass instead of Spark's
 *    CollectMetricsExec): physical planning;
 *  - [[AfterKeyedStageCheck]], a check rule: refuses a Spark stateful operator after a keyed
 *    stage when the DataFrame is built (analysis); off while a keyed stage itself is planned
 *    ([[AfterKeyedStageCheck.whilePlanning]]: its reference aggregation may sit on another stage);
 *  - [[OutputModeCheck]], a rule of the analyzer's hint batch: refuses outputMode("complete")
 *    when the query starts, before Spark's own check (ResolveWriteToStream) runs;
 *  - [[StageRecordCheck]], a columnar rule: in each micro-batch's preparations, once Spark gave
 *    the keyed stage its state info, checks a restart against the checkpoint's record of the
 *    stage, writing the record on the first run.
 * Not a Spark hook, but as easy to miss: the operator hands its per-key tally to the relay node
 * through a per-task registry (emission.KeyTally.openForTask / takeForTask).
 *
 * A session's rules are fixed when Spark builds its state, so a session without the extension
 * cannot get the check rules later: a keyed query there is refused ([[requireInstalled]]),
 * saying how to enable it, instead of running with fewer checks.
 */
private[keyedwatermarks] object SparkHooks {
  /** The planner strategies of our own plan nodes and observation. */
  val strategies: Seq[SparkStrategy] = Seq(KeyedPartialAggregateStrategy, KeyTallyRelayStrategy, OnePassMetricsStrategy)

  // The sessions Spark built with our extension (weakly held: a stopped session goes away).
  private val installed = Collections.synchronizedMap(new WeakHashMap[SparkSession, java.lang.Boolean]())

  /** Installs every hook (called by KeyedWatermarksExtensions). */
  def install(extensions: SparkSessionExtensions): Unit = {
    strategies.foreach(s => extensions.injectPlannerStrategy(_ => s))
    extensions.injectCheckRule { session =>
      installed.put(session, true)
      AfterKeyedStageCheck
    }
    extensions.injectColumnar(session => new StageRecordCheck(session))
    extensions.injectHintResolutionRule(_ => OutputModeCheck)
  }

  /** Refuses to plan a keyed query in a session built without the extension, saying how to enable it. */
  def requireInstalled(session: SparkSession): Unit = {
    val listed = session.conf.getOption("spark.sql.extensions").getOrElse("").split(",").map(_.trim)
      .contains(Contract.ExtensionsClass)
    if (!listed && !installed.containsKey(session)) throw new IllegalArgumentException(
      s"spark.sql.extensions: this SparkSession was built without ${Contract.ExtensionsClass}, which plans " +
        "keyed queries and checks them (a Spark stateful operator after a keyed stage, outputMode('complete'), a " +
        "restart against its checkpoint). Build the session with keyed_watermarks.configure(SparkSession.builder) " +
        s"(Python), or set --conf spark.sql.extensions=${Contract.ExtensionsClass} (appended to any other " +
        "extensions; on a Spark Connect server too)")
  }
}
