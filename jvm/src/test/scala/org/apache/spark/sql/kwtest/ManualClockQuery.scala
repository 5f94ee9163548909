package org.apache.spark.sql.kwtest

import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.classic
import org.apache.spark.sql.execution.streaming.sources.MemorySink
import org.apache.spark.sql.streaming.{OutputMode, StreamingQuery, Trigger}
import org.apache.spark.util.ManualClock

/**
 * Test-only: starts a streaming query whose processing-time trigger and batch timestamps follow
 * a ManualClock, so idle-timeout behaviour is tested without sleeps. Lives in Spark's package
 * because the trigger clock is not public API (as in Spark's own StreamTest).
 */
final class ManualClockQuery(df: DataFrame, val checkpoint: String, startMillis: Long) {
  /** Like Spark's StreamManualClock: knows when the trigger thread is waiting for the clock. */
  final class TriggerClock(start: Long) extends ManualClock(start) {
    private var waitingAt: Option[Long] = None
    override def waitTillTime(targetTime: Long): Long = {
      synchronized { waitingAt = Some(getTimeMillis()) }
      try super.waitTillTime(targetTime)
      finally synchronized { waitingAt = None }
    }
    def isWaitingAt(time: Long): Boolean = synchronized(waitingAt.contains(time))
  }

  val clock = new TriggerClock(startMillis)
  val sink = new MemorySink()
  val query: StreamingQuery = {
    val session = df.sparkSession.asInstanceOf[classic.SparkSession]
    session.streams.startQuery(
      userSpecifiedName = None,
      userSpecifiedCheckpointLocation = Some(checkpoint),
      df = df.asInstanceOf[classic.Dataset[Row]],
      extraOptions = Map.empty,
      sink = sink,
      outputMode = OutputMode.Append(),
      trigger = Trigger.ProcessingTime(1000L),
      triggerClock = clock)
  }

  awaitWaiting()

  private var rowsBeforeStep = 0

  /**
   * Advances the clock by `millis` (default: one trigger interval) and waits until the trigger
   * it starts is done: one micro-batch, with or without data, whatever the jump (the trigger
   * computes its next time from the clock after the batch).
   */
  def step(millis: Long = 1000L): Unit = {
    rowsBeforeStep = sink.allData.size
    clock.advance(millis)
    awaitWaiting()
  }

  private def awaitWaiting(): Unit = {
    val deadline = System.nanoTime() + 60L * 1000 * 1000 * 1000
    while (!clock.isWaitingAt(clock.getTimeMillis())) {
      query.exception.foreach(e => throw e)
      if (System.nanoTime() > deadline) throw new AssertionError("trigger did not finish within 60 s")
      Thread.sleep(10)
    }
  }

  /** Every row the query wrote so far. */
  def rows: Seq[Row] = sink.allData

  /** The rows the micro-batch of the last [[step]] wrote. */
  def newRows: Seq[Row] = sink.allData.drop(rowsBeforeStep)

  def stop(): Unit = query.stop()
}
