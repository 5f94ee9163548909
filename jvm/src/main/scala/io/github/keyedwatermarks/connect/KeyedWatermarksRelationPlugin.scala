package io.github.keyedwatermarks.connect

import java.util.Optional

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.connect.planner.SparkConnectPlanner
import org.apache.spark.sql.connect.plugin.RelationPlugin
import org.sparkproject.connect.protobuf.{Any => ProtoAny}

/**
 * The Spark Connect server plugin: register it with
 * `--conf spark.connect.extensions.relation.classes=io.github.keyedwatermarks.connect.KeyedWatermarksRelationPlugin`.
 *
 * The only file that depends on RelationPlugin's signature, which changed across Spark
 * versions: 3.4/3.5 passed a shaded protobuf `Any`, 4.x passes the `Any`'s bytes.
 */
class KeyedWatermarksRelationPlugin extends RelationPlugin {
  override def transform(relation: Array[Byte], planner: SparkConnectPlanner): Optional[LogicalPlan] = {
    val any = ProtoAny.parseFrom(relation)
    if (!KeyedWatermarksRelation.isTypeUrl(any.getTypeUrl)) Optional.empty()
    else Optional.of(ConnectQuery.logicalPlan(KeyedWatermarksRelation.parse(any.getValue), planner))
  }
}
