package org.apache.spark.sql.kwtest

import org.apache.spark.sql.{Encoder, SparkSession}

/** Test-only: a MemoryStream with a number of partitions, whose factory differs per Spark line (4.0: MemoryStream(numPartitions)(encoder, SQLContext)). */
object MemoryStreams {
  def apply[A](spark: SparkSession, numPartitions: Int)(encoder: Encoder[A]) =
    org.apache.spark.sql.execution.streaming.MemoryStream[A](numPartitions)(encoder, spark.sqlContext)
}
