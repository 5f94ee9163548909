package org.apache.spark.sql.keyedwatermarks

import org.apache.spark.sql.Row
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.statefulprocessor.ImplicitGroupingKeyTracker
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.testing.InMemoryStatefulProcessorHandle
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.timers.{
  ExpiredTimerInfoImpl, TimerValuesImpl
}
import org.apache.spark.sql.streaming.{OutputMode, StatefulProcessor, TimeMode}
import org.apache.spark.util.ManualClock

import io.github.keyedwatermarks.testing.InMemoryOperator

/**
 * A `transformWithState` processor over the in-memory state store and timers of Spark's
 * `TwsTester` (`InMemoryStatefulProcessorHandle`, Spark 4.2 and later), for the public test kit
 * (`testing.KeyedQueryTester`). In Spark's package because the handle's clock type is not public
 * API; that clock only serves state TTL, which the operator does not use.
 */
object InMemoryTws {
  val Available = true

  def operator(processor: StatefulProcessor[Row, Row, Row], timeMode: TimeMode): InMemoryOperator =
    new InMemoryOperator {
      private val handle = new InMemoryStatefulProcessorHandle(timeMode, new ManualClock(0L))
      processor.setHandle(handle)
      processor.init(OutputMode.Append(), timeMode)

      def handleRows(key: Row, rows: Iterator[Row], processingTimeMs: Long, watermarkMs: Option[Long]): Seq[Row] = {
        ImplicitGroupingKeyTracker.setImplicitKey(key)
        try processor.handleInputRows(key, rows, new TimerValuesImpl(Some(processingTimeMs), watermarkMs)).toList
        finally ImplicitGroupingKeyTracker.removeImplicitKey()
      }

      def fireTimers(thresholdMs: Long, processingTimeMs: Long, watermarkMs: Option[Long]): Seq[Row] =
        handle.timers.listExpiredTimers[Row](thresholdMs).flatMap { case (expiry, key) =>
          ImplicitGroupingKeyTracker.setImplicitKey(key)
          try {
            val out = processor
              .handleExpiredTimer(key, new TimerValuesImpl(Some(processingTimeMs), watermarkMs),
                new ExpiredTimerInfoImpl(Some(expiry)))
              .toList
            handle.deleteTimer(expiry)
            out
          } finally ImplicitGroupingKeyTracker.removeImplicitKey()
        }
    }
}
