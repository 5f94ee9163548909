package io.github.keyedwatermarks.window

/**
 * Assigns an event time (microseconds) to its window. Windows are [start, start + size),
 * aligned to the Unix epoch exactly as Spark's `F.window(ts, size)` aligns them, so our window
 * bounds equal Spark's.
 */
sealed trait WindowAssigner extends Serializable {
  /** Start of the window holding `eventTime`. */
  def windowStart(eventTime: Long): Long
  /** End (exclusive) of the window starting at `start`. */
  def windowEnd(start: Long): Long
}

/** Fixed-size, non-overlapping windows. */
final case class TumblingWindows(sizeMicros: Long) extends WindowAssigner {
  require(sizeMicros > 0, s"window size must be positive, got $sizeMicros microseconds")

  override def windowStart(eventTime: Long): Long = eventTime - Math.floorMod(eventTime, sizeMicros)

  override def windowEnd(start: Long): Long = start + sizeMicros
}
