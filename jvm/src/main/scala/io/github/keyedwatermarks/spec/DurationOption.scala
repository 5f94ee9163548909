package io.github.keyedwatermarks.spec

import io.github.keyedwatermarks.compat.SparkInternals

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
    DurationOption(option, text, SparkInternals.durationMicros(option, text))

  def nonNegative(option: String, text: String): DurationOption = {
    val d = DurationOption(option, text)
    if (d.micros < 0) fail(s"$option: must not be negative, got '$text'")
    d
  }

  def positive(option: String, text: String): DurationOption = {
    val d = DurationOption(option, text)
    if (d.micros <= 0) fail(s"$option: must be positive, got '$text'")
    d
  }

  private[spec] def fail(message: String): Nothing = throw new IllegalArgumentException(message)
}
