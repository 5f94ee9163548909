package io.github.keyedwatermarks.window

import org.apache.spark.sql.catalyst.expressions.{Expression, Literal, Pmod, Subtract}

/**
 * Assigns an event time (microseconds) to its windows. Two kinds, as in the spec: aligned
 * windows, whose bounds an event time fixes, and sessions, whose bounds grow as a key's rows
 * merge (in the operator).
 */
private[keyedwatermarks] sealed trait WindowAssigner extends Serializable {

  /**
   * Calls `f` with the start of every window holding `eventTime`, latest first: the first one
   * passed is the row's last window, the one that closes last.
   */
  def foreachWindowStart(eventTime: Long)(f: Long => Unit): Unit

  /** The most windows one row falls in. */
  def windowsPerRow: Long
}

/**
 * Windows [start, start + size) with starts every `slide`, aligned to the Unix epoch exactly as
 * Spark's `F.window(ts, size[, slide])` aligns them, so our window bounds equal Spark's.
 */
private[keyedwatermarks] sealed trait AlignedWindows extends WindowAssigner {
  def sizeMicros: Long

  /** Distance between consecutive window starts (= size for tumbling windows). */
  def slideMicros: Long

  /** Start of the last (latest-starting) window holding `eventTime`. */
  final def lastWindowStart(eventTime: Long): Long = eventTime - Math.floorMod(eventTime, slideMicros)

  /** [[lastWindowStart]] as a Catalyst expression over the event time (the hash-aggregate path). */
  final def lastWindowStart(eventTime: Expression): Expression =
    Subtract(eventTime, Pmod(eventTime, Literal(slideMicros)))

  final def foreachWindowStart(eventTime: Long)(f: Long => Unit): Unit = {
    var start = lastWindowStart(eventTime)
    while (start + sizeMicros > eventTime) {
      f(start)
      start -= slideMicros
    }
  }

  /** ceil(size / slide): 1 for tumbling windows. */
  final def windowsPerRow: Long = (sizeMicros + slideMicros - 1) / slideMicros

  /** End (exclusive) of the window starting at `start`. */
  final def windowEnd(start: Long): Long = start + sizeMicros
}

/** Fixed-size, non-overlapping windows. */
private[keyedwatermarks] final case class TumblingWindows(sizeMicros: Long) extends AlignedWindows {
  require(sizeMicros > 0, s"window size must be positive, got $sizeMicros microseconds")

  override def slideMicros: Long = sizeMicros
}

/** Fixed-size windows starting every `slide`; a row belongs to every window that covers it. */
private[keyedwatermarks] final case class SlidingWindows(sizeMicros: Long, slideMicros: Long) extends AlignedWindows {
  require(sizeMicros > 0, s"window size must be positive, got $sizeMicros microseconds")
  require(slideMicros > 0 && slideMicros <= sizeMicros,
    s"slide must be positive and at most the window size, got $slideMicros for size $sizeMicros")
}

/**
 * Session windows: each row opens its own interval [t, t + gap); the operator merges a key's
 * intervals and sessions that touch (next start <= current end, as Spark's session_window
 * merges), across micro-batches. A row's one window starts at its event time. Its end is
 * `t + gapMicros` for a fixed gap, or, without one (a per-row gap: a column, or days in the
 * session time zone), computed by Catalyst per row and carried by each partial.
 */
private[keyedwatermarks] final case class SessionWindows(gapMicros: Option[Long]) extends WindowAssigner {
  require(gapMicros.forall(_ > 0), s"session gap must be positive, got ${gapMicros.getOrElse(0L)} microseconds")

  override def foreachWindowStart(eventTime: Long)(f: Long => Unit): Unit = f(eventTime)

  override def windowsPerRow: Long = 1L
}
