package io.github.keyedwatermarks.hooks

import java.util.concurrent.ConcurrentHashMap

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{ColumnarRule, SparkPlan}

import io.github.keyedwatermarks.operator.KeyedWindowProcessor
import io.github.keyedwatermarks.shims.StatefulOperatorFields
import io.github.keyedwatermarks.shims.StatefulOperatorFields.StateInfo
import io.github.keyedwatermarks.state.StageRecord

/**
 * Refuses a restart with an incompatible query before its first micro-batch runs
 * (docs/semantics.md, "Upgrades"): checks each keyed stage against the record in the checkpoint
 * (state.StageRecord), writing it when there is none yet.
 *
 * A columnar rule (installed by [[SparkHooks]]) because that is where a keyed stage
 * first meets its checkpoint on the driver: in every Spark line 4.0-4.3, a micro-batch's
 * IncrementalExecution fills `TransformWithStateExec.stateInfo` (checkpoint location, operator
 * id, batch) in its `state` rule, then runs QueryExecution's preparations, whose
 * ApplyColumnarRulesAndInsertTransitions applies this before anything executes. The operator
 * moved package in 4.1, so it is found by its fields (shims.StatefulOperatorFields). Once per run
 * and stage: later batches of the run plan the same query.
 */
private[keyedwatermarks] final class StageRecordCheck(session: SparkSession) extends ColumnarRule {
  override def preColumnarTransitions: Rule[SparkPlan] = new Rule[SparkPlan] {
    def apply(plan: SparkPlan): SparkPlan = {
      plan.foreach(node =>
        StageRecordCheck.keyedStage(node).foreach { case (processor, info) =>
          StageRecordCheck.checkOnce(session, processor, info)
        })
      plan
    }
  }
}

private[keyedwatermarks] object StageRecordCheck {
  /** (query run, state directory) checked in this JVM. */
  private val checked = ConcurrentHashMap.newKeySet[String]()

  /** A keyed stage's operator (our transformWithState, once Spark gave it its state info). */
  def keyedStage(node: SparkPlan): Option[(KeyedWindowProcessor, StateInfo)] =
    StatefulOperatorFields.processorAndStateInfo(node).collect { case (p: KeyedWindowProcessor, info) => (p, info) }

  def checkOnce(session: SparkSession, processor: KeyedWindowProcessor, info: StateInfo): Unit = {
    val stateDir = new Path(new Path(info.checkpointLocation), info.operatorId.toString)
    val root = stateDir.getParent.getParent
    val conf = session.sparkContext.hadoopConfiguration
    // Only a running query's checkpoint (Spark writes its `metadata` as the query starts), not
    // e.g. the "<unknown>" location of explain() on a streaming DataFrame.
    if (!checked.contains(s"${info.queryRunId} $stateDir") && root != null &&
      root.getFileSystem(conf).exists(new Path(root, "metadata"))) {
      StageRecord.check(stateDir, processor.stageRecord(info.batch), conf)
      checked.add(s"${info.queryRunId} $stateDir")
    }
  }
}
