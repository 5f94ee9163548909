package org.apache.spark.sql.kwtest

import org.apache.spark.sql.{Encoder, SparkSession}

/** Test-only: a MemoryStream with a number of partitions, whose factory differs per Spark line (4.2 and 4.3: MemoryStream(SparkSession, numPartitions)(encoder)). */
object MemoryStreams {
  def apply[A](spark: SparkSession, numPartitions: Int)(encoder: Encoder[A]) =
    org.apache.spark.sql.execution.streaming.runtime.MemoryStream[A](spark, numPartitions)(encoder)
}
