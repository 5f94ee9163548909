package org.apache.spark.sql.execution.streaming

import org.apache.spark.sql.{Encoder, SparkSession}

/**
 * Test-only shim: Spark 4.1 moved MemoryStream and StreamingQueryWrapper into
 * `...execution.streaming.runtime` and added MemoryStream(encoder, SparkSession). The suites
 * use those names; on Spark 4.0 they map onto 4.0's classes here.
 */
package object runtime {
  type MemoryStream[A] = org.apache.spark.sql.execution.streaming.MemoryStream[A]
  type StreamingQueryWrapper = org.apache.spark.sql.execution.streaming.StreamingQueryWrapper

  object MemoryStream {
    def apply[A](encoder: Encoder[A], spark: SparkSession): MemoryStream[A] =
      org.apache.spark.sql.execution.streaming.MemoryStream[A](encoder, spark.sqlContext)
  }
}
