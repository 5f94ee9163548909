package io.github.keyedwatermarks.watermark

/**
 * The event-time watermark of one key: `max event time seen for the key - lateness`.
 * Undefined until the key's first row; it never moves backward because it derives from a
 * running maximum. Only the key's own rows move it.
 */
final class KeyWatermark(lateness: Long, private var maxEventTime: Long) {
  import KeyWatermark.Undefined

  def this(lateness: Long) = this(lateness, KeyWatermark.Undefined)

  def isDefined: Boolean = maxEventTime != Undefined

  /** The watermark, or [[KeyWatermark.Undefined]] before the first row. */
  def current: Long = if (isDefined) saturatingMinus(maxEventTime, lateness) else Undefined

  def maxEventTimeSeen: Long = maxEventTime

  def observe(eventTime: Long): Unit = if (eventTime > maxEventTime) maxEventTime = eventTime

  private def saturatingMinus(a: Long, b: Long): Long = {
    val r = a - b
    if (((a ^ b) & (a ^ r)) < 0) Long.MinValue + 1 else r
  }
}

object KeyWatermark {
  /** Sentinel for "no watermark yet": below every real watermark. */
  val Undefined: Long = Long.MinValue
}

/** When a window (by its end) is closed for a key's watermark: `end <= watermark`. */
object LateRowPolicy {
  /** A row is late if its window was already closed by the watermark at the start of the batch. */
  def isClosed(windowEnd: Long, watermark: Long): Boolean =
    watermark != KeyWatermark.Undefined && windowEnd <= watermark
}
