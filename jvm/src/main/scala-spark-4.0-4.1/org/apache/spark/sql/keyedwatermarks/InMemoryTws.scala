package org.apache.spark.sql.keyedwatermarks

import org.apache.spark.SPARK_VERSION
import org.apache.spark.sql.Row
import org.apache.spark.sql.streaming.{StatefulProcessor, TimeMode}

import io.github.keyedwatermarks.testing.InMemoryOperator

/**
 * Spark 4.0 and 4.1 have no in-memory `transformWithState` handle (`TwsTester` came with 4.2), so
 * the test kit (`testing.KeyedQueryTester`) refuses to start on these lines, saying so.
 */
object InMemoryTws {
  val Available = false

  def operator(processor: StatefulProcessor[Row, Row, Row], timeMode: TimeMode): InMemoryOperator =
    throw new UnsupportedOperationException(
      s"keyed_watermarks.testing runs the keyed operator in memory on Spark's TwsTester, which Spark $SPARK_VERSION " +
        "does not have: run the tests on pyspark 4.2 or later (the job itself may run on " +
        s"$SPARK_VERSION)")
}
