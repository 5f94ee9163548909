package org.apache.spark.sql.kwtest

import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.testing.InMemoryStatefulProcessorHandle
import org.apache.spark.sql.streaming.TimeMode
import org.apache.spark.util.ManualClock

/**
 * Test-only: the in-memory state store and timers of Spark's TwsTester, for the in-memory
 * operator harness (testing.OperatorHarness). In Spark's package because its clock type is not
 * public API; the clock only serves state TTL, which the operator does not use.
 */
object InMemoryHandles {
  def apply(timeMode: TimeMode): InMemoryStatefulProcessorHandle =
    new InMemoryStatefulProcessorHandle(timeMode, new ManualClock(0L))
}
