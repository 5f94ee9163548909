package io.github.keyedwatermarks.input

import org.apache.spark.sql.{Column, DataFrame, functions => F}

import io.github.keyedwatermarks.catalyst.SparkInternals

/**
 * A row's own session end for a per-row gap, computed as Spark's `session_window` computes it:
 * `ts + CAST(gap AS INTERVAL)`, Catalyst's calendar arithmetic in the session time zone. So a
 * "1 day" gap across a daylight-saving change or a "1 month" gap ends exactly where Spark's
 * session ends (a fixed number of microseconds per gap would not).
 */
private[keyedwatermarks] object SessionGap {

  /**
   * The end in microseconds since the epoch (null when the gap is null or not a duration).
   * Fails before the query starts if the gap is not of a type session_window accepts.
   */
  def rowEndMicros(events: DataFrame, eventTime: Column, gap: Column): Column = {
    checkType(events, gap)
    F.unix_micros(eventTime + gap.cast("interval"))
  }

  /** Fails before the query starts if `gap` is unknown or not of a type session_window accepts. */
  def checkType(events: DataFrame, gap: Column): Unit = {
    val dataType = events.select(gap).schema.head.dataType
    if (!SparkInternals.castsToCalendarInterval(dataType)) throw new IllegalArgumentException(
      s"gap: the column must hold durations as session_window accepts them (a string such as " +
        s"'5 minutes', or a calendar INTERVAL), but it is ${dataType.sql}")
  }

  /** Spark's session_window drops a row whose session would not end after it starts. */
  def invalid(rowEnd: Column, eventTime: Column): Column = rowEnd.isNull || rowEnd <= F.unix_micros(eventTime)
}
