package io.github.keyedwatermarks.window

/**
 * Assigns an event time (microseconds) to its windows. Windows are [start, start + size),
 * with starts aligned to the Unix epoch exactly as Spark's `F.window(ts, size[, slide])`
 * aligns them, so our window bounds equal Spark's.
 */
sealed trait WindowAssigner extends Serializable {
  def sizeMicros: Long

  /** Start of the last (latest-starting) window holding `eventTime`. */
  def lastWindowStart(eventTime: Long): Long

  /** Distance between consecutive window starts (= size for tumbling windows). */
  def slideMicros: Long

  /**
   * Calls `f` with the start of every window holding `eventTime`, latest first. A row belongs
   * to ceil(size / slide) or fewer windows; the first one passed is its last window, the one
   * that closes last.
   */
  @inline final def foreachWindowStart(eventTime: Long)(f: Long => Unit): Unit = {
    val last = lastWindowStart(eventTime)
    val n = windowCount(eventTime, last)
    var i = 0
    while (i < n) { f(last - i * slideMicros); i += 1 }
  }

  /**
   * How many windows hold `eventTime`, given its [[lastWindowStart]] `last`: the i-th of them
   * (0 = the last) starts at `last - i * slideMicros`. For hot loops that should not allocate
   * a closure per row, as foreachWindowStart does.
   */
  final def windowCount(eventTime: Long, last: Long): Int = {
    // Windows last - i * slide hold eventTime while last - i * slide + size > eventTime.
    val span = last + sizeMicros - eventTime
    ((span + slideMicros - 1) / slideMicros).toInt
  }

  /** End (exclusive) of the window starting at `start`. */
  final def windowEnd(start: Long): Long = start + sizeMicros
}

/** Fixed-size, non-overlapping windows. */
final case class TumblingWindows(sizeMicros: Long) extends WindowAssigner {
  require(sizeMicros > 0, s"window size must be positive, got $sizeMicros microseconds")

  override def slideMicros: Long = sizeMicros

  override def lastWindowStart(eventTime: Long): Long = eventTime - Math.floorMod(eventTime, sizeMicros)

  /** The only window holding `eventTime`. */
  def windowStart(eventTime: Long): Long = lastWindowStart(eventTime)
}

/** Fixed-size windows starting every `slide`; a row belongs to every window that covers it. */
final case class SlidingWindows(sizeMicros: Long, slideMicros: Long) extends WindowAssigner {
  require(sizeMicros > 0, s"window size must be positive, got $sizeMicros microseconds")
  require(slideMicros > 0 && slideMicros <= sizeMicros,
    s"slide must be positive and at most the window size, got $slideMicros for size $sizeMicros")

  override def lastWindowStart(eventTime: Long): Long = eventTime - Math.floorMod(eventTime, slideMicros)
}

/**
 * Session windows: each row opens [t, t + gap); sessions of a key whose intervals touch (next
 * start <= current end, as Spark's session_window merges) are merged, across micro-batches, by
 * the operator. Here a row's only "window" is its own interval. With `dynamicGap` the gap is
 * a per-row expression and each partial carries its end, t + gap computed by Catalyst
 * (`gapMicros` is unused).
 */
final case class SessionWindows(gapMicros: Long, dynamicGap: Boolean = false) extends WindowAssigner {
  require(dynamicGap || gapMicros > 0, s"session gap must be positive, got $gapMicros microseconds")

  // A row's one "window" starts at its event time; with a dynamic gap its end comes from the
  // row (the partial carries it), and a 1-microsecond size only makes foreachWindowStart visit t.
  override def sizeMicros: Long = if (dynamicGap) 1L else gapMicros
  override def slideMicros: Long = sizeMicros
  override def lastWindowStart(eventTime: Long): Long = eventTime
}
