package io.github.keyedwatermarks.planner

import java.util.concurrent.ConcurrentHashMap

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{ColumnarRule, SparkPlan}

import io.github.keyedwatermarks.operator.KeyedWindowProcessor
import io.github.keyedwatermarks.state.StageRecord

/**
 * Refuses a restart with an incompatible query before its first micro-batch runs
 * (docs/semantics.md, "Upgrades"): checks each keyed stage against the record in the checkpoint
 * (state.StageRecord), writing it when there is none yet.
 *
 * A columnar rule (registered by KeyedWatermarksExtensions) because that is where a keyed stage
 * first meets its checkpoint on the driver: in every Spark line 4.0-4.3, a micro-batch's
 * IncrementalExecution fills `TransformWithStateExec.stateInfo` (checkpoint location, operator
 * id, batch) in its `state` rule, then runs QueryExecution's preparations, whose
 * ApplyColumnarRulesAndInsertTransitions applies this before anything executes. The operator
 * moved package in 4.1, so it is found by its fields (as a Product), not by class. Once per run
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

  /** Where a stage's state is, and the batch being planned (Spark's StatefulOperatorStateInfo). */
  final case class StateInfo(checkpointLocation: String, operatorId: Long, batch: Long, queryRunId: String)

  /** A keyed stage's operator (our transformWithState, once Spark gave it its state info). */
  def keyedStage(node: SparkPlan): Option[(KeyedWindowProcessor, StateInfo)] = {
    val fields = node.productElementNames.zip(node.productIterator).toMap
    (fields.get("statefulProcessor"), fields.get("stateInfo")) match {
      case (Some(p: KeyedWindowProcessor), Some(Some(info: Product))) =>
        val f = info.productElementNames.zip(info.productIterator).toMap
        (f.get("checkpointLocation"), f.get("operatorId"), f.get("storeVersion"), f.get("queryRunId")) match {
          case (Some(location: String), Some(id: Long), Some(batch: Long), Some(run)) =>
            Some((p, StateInfo(location, id, batch, String.valueOf(run))))
          case _ => None
        }
      case _ => None
    }
  }

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
