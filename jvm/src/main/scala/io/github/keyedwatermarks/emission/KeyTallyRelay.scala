package io.github.keyedwatermarks.emission

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, UnsafeProjection}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}

/**
 * After the keyed operator, in the same task: passes the operator's rows (one BINARY column,
 * see [[WindowEmitter.OperatorOutputSchema]]) through and adds, after the last, one "key" row
 * with the task's [[KeyTally]] (operator `tallyId`'s, see [[KeyTally.openForTask]]), which the
 * per-batch metrics merge ([[KeyMetrics]]) and then drop. The operator itself cannot emit it:
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
    val schema = output.map(_.dataType).toArray
    child.execute().mapPartitions { rows =>
      new Iterator[InternalRow] {
        // None until the operator's rows are exhausted; then the tally row, if any, until taken.
        private var tally: Option[InternalRow] = None
        private var ended = false

        override def hasNext: Boolean = rows.hasNext || {
          if (!ended) {
            ended = true
            tally = KeyTally.takeForTask(operator).map { t =>
              UnsafeProjection.create(schema).apply(InternalRow(rowOf.keyTally(t.toBytes)))
            }
          }
          tally.isDefined
        }

        override def next(): InternalRow =
          if (rows.hasNext) rows.next()
          else if (hasNext) { val row = tally.get; tally = None; row }
          else throw new NoSuchElementException("no row after the key tally")
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
