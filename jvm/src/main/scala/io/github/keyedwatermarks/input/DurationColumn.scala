package io.github.keyedwatermarks.input

import org.apache.spark.sql.{Column, DataFrame, functions => F}
import org.apache.spark.sql.types.{CalendarIntervalType, DayTimeIntervalType, StringType}

/**
 * A per-row duration (per-key lateness): a Spark duration string ("5 minutes"), a DAY TO
 * SECOND interval or a calendar interval, turned into microseconds with Catalyst's own interval
 * arithmetic (epoch + interval), so no parsing is re-implemented here.
 */
private[keyedwatermarks] object DurationColumn {
  /** The value of an unparsable duration (any negative value is invalid too). */
  val Invalid: Long = -1L

  /** Rows whose duration is invalid: unparsable or negative (null is not: it means the default). */
  def invalid(micros: Column): Column = micros.isNotNull && micros < 0

  /**
   * Microseconds of the duration (null stays null; an unparsable string gives [[Invalid]]).
   * Fails before the query starts if the column is unknown or not a duration type.
   */
  def micros(events: DataFrame, column: Column, option: String): Column = {
    val epoch = F.timestamp_micros(F.lit(0L))
    events.select(column).schema.head.dataType match {
      // An unparsable string is Invalid (not null, which means "the default"): a bad value of
      // one row is counted as an invalid row, never silently replaced nor fatal to the query.
      case StringType =>
        F.when(column.isNull, F.lit(null).cast("long"))
          .otherwise(F.coalesce(F.unix_micros(epoch + column.try_cast("interval")), F.lit(Invalid)))
      case CalendarIntervalType | _: DayTimeIntervalType => F.unix_micros(epoch + column)
      case other => throw new IllegalArgumentException(
          s"$option: the column must hold durations (a string such as '5 minutes', or an INTERVAL DAY TO SECOND), " +
            s"but it is ${other.sql}")
    }
  }
}
