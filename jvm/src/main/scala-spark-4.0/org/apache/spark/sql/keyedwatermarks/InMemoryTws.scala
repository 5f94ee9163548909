package org.apache.spark.sql.keyedwatermarks

import org.apache.spark.sql.Row
import org.apache.spark.sql.streaming.{StatefulProcessor, TimeMode}

import io.github.keyedwatermarks.testing.InMemoryOperator

/**
 * Spark 4.0 has no in-memory `transformWithState` handle (`TwsTester` came with 4.2), so the
 * test kit (`testing.KeyedQueryTester`) refuses to start on this line, saying so.
 */
object InMemoryTws {
  val Available = false

  def operator(processor: StatefulProcessor[Row, Row, Row], timeMode: TimeMode): InMemoryOperator =
    throw new UnsupportedOperationException(
      "keyed_watermarks.testing runs the keyed operator in memory on Spark's TwsTester, which Spark 4.0 " +
        "does not have: run the tests on pyspark 4.2 or later (the job itself may run on 4.0)")
}
