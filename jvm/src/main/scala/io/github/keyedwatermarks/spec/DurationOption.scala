package io.github.keyedwatermarks.spec

import java.util.concurrent.TimeUnit

import org.apache.spark.sql.catalyst.util.IntervalUtils
import org.apache.spark.unsafe.types.UTF8String

/**
 * A duration option as the user wrote it (a Spark duration string such as "10 seconds") and
 * its length in microseconds, parsed by Spark's own interval parser. `option` is the name the
 * user knows (the Python keyword), so every error names it.
 */
final case class DurationOption(option: String, text: String, micros: Long) {
  def millis: Long = math.max(1L, micros / 1000L)
}

object DurationOption {
  def apply(option: String, text: String): DurationOption =
    DurationOption(option, text, micros(option, text))

  def nonNegative(option: String, text: String): DurationOption = {
    val d = DurationOption(option, text)
    if (d.micros < 0) OptionError(s"$option: must not be negative, got '$text'")
    d
  }

  def positive(option: String, text: String): DurationOption = {
    val d = DurationOption(option, text)
    if (d.micros <= 0) OptionError(s"$option: must be positive, got '$text'")
    d
  }

  /**
   * Parses a Spark duration string ("10 seconds", "1 minute 30 seconds", "500 milliseconds")
   * with Spark's own interval parser, as `F.window` does. Month-based units are rejected
   * because their length in microseconds is not fixed.
   */
  def micros(option: String, text: String): Long = {
    if (text == null || text.trim.isEmpty) OptionError(s"$option: a duration is required, e.g. '10 seconds'")
    val interval =
      try IntervalUtils.stringToInterval(UTF8String.fromString(text))
      catch {
        case e: Exception =>
          OptionError(s"$option: '$text' is not a valid duration (use e.g. '10 seconds', '1 minute'): ${e.getMessage}")
      }
    if (interval.months != 0)
      OptionError(s"$option: '$text' uses months or years, which have no fixed length; use days or smaller units")
    IntervalUtils.getDuration(interval, TimeUnit.MICROSECONDS, 31)
  }

  /** The days field of a duration string ("1 day 2 hours" -> 1), already validated by [[micros]]. */
  private[spec] def days(text: String): Int = IntervalUtils.stringToInterval(UTF8String.fromString(text)).days
}
