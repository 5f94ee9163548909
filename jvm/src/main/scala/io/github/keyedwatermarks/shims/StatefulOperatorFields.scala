package io.github.keyedwatermarks.shims

import org.apache.spark.sql.execution.SparkPlan

/**
 * Spark's `TransformWithStateExec` moved package in 4.1, so it is found by its fields (as a
 * Product: `statefulProcessor`, `stateInfo`), not by class, on every Spark line.
 */
private[keyedwatermarks] object StatefulOperatorFields {

  /** Where a stateful operator's state is, and the batch being planned (Spark's StatefulOperatorStateInfo). */
  final case class StateInfo(checkpointLocation: String, operatorId: Long, batch: Long, queryRunId: String)

  /** The stateful processor of a transformWithState exec and its state info, once Spark set it; else None. */
  def processorAndStateInfo(node: SparkPlan): Option[(AnyRef, StateInfo)] = {
    val fields = node.productElementNames.zip(node.productIterator).toMap
    (fields.get("statefulProcessor"), fields.get("stateInfo")) match {
      case (Some(p: AnyRef), Some(Some(info: Product))) =>
        val f = info.productElementNames.zip(info.productIterator).toMap
        (f.get("checkpointLocation"), f.get("operatorId"), f.get("storeVersion"), f.get("queryRunId")) match {
          case (Some(location: String), Some(id: Long), Some(batch: Long), Some(run)) =>
            Some((p, StateInfo(location, id, batch, String.valueOf(run))))
          case _ => None
        }
      case _ => None
    }
  }
}
