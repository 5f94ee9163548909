package io.github.keyedwatermarks.testing

import org.apache.spark.sql.Row

/**
 * The keyed operator run in memory, one key at a time, as `transformWithState` runs it in a
 * micro-batch: over Spark's in-memory state store and timers (`TwsTester`'s handle, Spark 4.2 and
 * later; the line-specific part is `org.apache.spark.sql.keyedwatermarks.InMemoryTws` in
 * jvm/src/main/scala-spark-4.0-4.1/ and scala-spark-4.2-4.3/).
 */
trait InMemoryOperator {

  /** One key's rows of a micro-batch, with the batch's clocks (ms; the watermark only in event-time mode). */
  def handleRows(key: Row, rows: Iterator[Row], processingTimeMs: Long, watermarkMs: Option[Long]): Seq[Row]

  /** The timers due at `thresholdMs` (ms), each handled and then deleted, as Spark does after the rows. */
  def fireTimers(thresholdMs: Long, processingTimeMs: Long, watermarkMs: Option[Long]): Seq[Row]
}
