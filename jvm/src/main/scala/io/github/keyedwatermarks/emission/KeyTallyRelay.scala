package io.github.keyedwatermarks.emission

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}

import io.github.keyedwatermarks.catalyst.ProjectionPool

/**
 * After the keyed operator, in the same task: passes the operator's rows (one BINARY column,
 * see [[WindowEmitter.OperatorOutputSchema]]) through and adds, after the last, one "key" row
 * with the task's [[KeyTally]] (operator `tallyId`'s, see [[KeyTally.openForTask]]), which the
 * per-batch metrics merge ([[OutputMetrics]]) and then drop. The operator itself cannot emit it:
 * `transformWithState` hands its processor no end-of-partition call that returns rows.
 */
private[keyedwatermarks] final case class KeyTallyRelay(tallyId: String, emitter: WindowEmitter, child: LogicalPlan)
    extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def withNewChildInternal(newChild: LogicalPlan): KeyTallyRelay = copy(child = newChild)
}

private[keyedwatermarks] final case class KeyTallyRelayExec(tallyId: String, emitter: WindowEmitter, child: SparkPlan)
    extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override protected def withNewChildInternal(newChild: SparkPlan): KeyTallyRelayExec = copy(child = newChild)

  override protected def doExecute(): RDD[InternalRow] = {
    val operator = tallyId
    val rowOf = emitter
    val schema = DataTypeUtils.fromAttributes(output)
    // `++` takes its right side by name: the tally is taken only once the operator's rows are
    // exhausted, which is when transformWithState has handled every key and timer of the task.
    child.execute().mapPartitions { rows =>
      rows ++ KeyTally.takeForTask(operator).iterator.map { t =>
        ProjectionPool.unsafe(schema).apply(InternalRow(rowOf.keyTally(t.toBytes)))
      }
    }
  }
}

private[keyedwatermarks] object KeyTallyRelayStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case r: KeyTallyRelay => KeyTallyRelayExec(r.tallyId, r.emitter, planLater(r.child)) :: Nil
    case _ => Nil
  }
}
