package io.github.keyedwatermarks.input

import org.apache.spark.sql.{Column, DataFrame, functions => F}
import org.apache.spark.sql.types.{CalendarIntervalType, DayTimeIntervalType, StringType}

/**
 * A per-row duration (per-key lateness): a Spark duration string ("5 minutes"), a DAY TO
 * SECOND interval or a calendar interval, turned into microseconds with Catalyst's own interval
 * arithmetic (epoch + interval), so no parsing is re-implemented here.
 */
object DurationColumn {

  /**
   * Microseconds of the duration (null stays null). Fails before the query starts if the
   * column is unknown or not a duration type.
   */
  def micros(events: DataFrame, column: Column, option: String): Column = {
    val epoch = F.timestamp_micros(F.lit(0L))
    events.select(column).schema.head.dataType match {
      case StringType => F.unix_micros(epoch + column.cast("interval"))
      case CalendarIntervalType | _: DayTimeIntervalType => F.unix_micros(epoch + column)
      case other => throw new IllegalArgumentException(
        s"$option: the column must hold durations (a string such as '5 minutes', or an INTERVAL DAY TO SECOND), " +
          s"but it is ${other.sql}")
    }
  }
}
