package io.github.keyedwatermarks.window

/**
 * Assigns an event time (microseconds) to its windows. Windows are [start, start + size),
 * with starts aligned to the Unix epoch exactly as Spark's `F.window(ts, size[, slide])`
 * aligns them, so our window bounds equal Spark's.
 */
private[keyedwatermarks] sealed trait WindowAssigner extends Serializable {
  def sizeMicros: Long

  /** Start of the last (latest-starting) window holding `eventTime`. */
  def lastWindowStart(eventTime: Long): Long

  /** Distance between consecutive window starts (= size for tumbling windows). */
  def slideMicros: Long

  /**
   * Calls `f` with the start of every window holding `eventTime`, latest first. A row belongs
   * to [[maxWindowsPerEvent]] or fewer windows; the first one passed is its last window, the one
   * that closes last.
   */
  @inline final def foreachWindowStart(eventTime: Long)(f: Long => Unit): Unit = {
    var start = lastWindowStart(eventTime)
    while (start + sizeMicros > eventTime) {
      f(start)
      start -= slideMicros
    }
  }

  /** The most windows one event time can fall in: ceil(size / slide) (1 unless sliding). */
  final def maxWindowsPerEvent: Long = (sizeMicros + slideMicros - 1) / slideMicros

  /** End (exclusive) of the window starting at `start`. */
  final def windowEnd(start: Long): Long = start + sizeMicros
}

/** Fixed-size, non-overlapping windows. */
private[keyedwatermarks] final case class TumblingWindows(sizeMicros: Long) extends WindowAssigner {
  require(sizeMicros > 0, s"window size must be positive, got $sizeMicros microseconds")

  override def slideMicros: Long = sizeMicros

  override def lastWindowStart(eventTime: Long): Long = eventTime - Math.floorMod(eventTime, sizeMicros)

  /** The only window holding `eventTime`. */
  def windowStart(eventTime: Long): Long = lastWindowStart(eventTime)
}

/** Fixed-size windows starting every `slide`; a row belongs to every window that covers it. */
private[keyedwatermarks] final case class SlidingWindows(sizeMicros: Long, slideMicros: Long) extends WindowAssigner {
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
private[keyedwatermarks] final case class SessionWindows(gapMicros: Long, dynamicGap: Boolean = false)
    extends WindowAssigner {
  require(dynamicGap || gapMicros > 0, s"session gap must be positive, got $gapMicros microseconds")

  // A row's one "window" starts at its event time; with a dynamic gap its end comes from the
  // row (the partial carries it), and a 1-microsecond size only makes foreachWindowStart visit t.
  override def sizeMicros: Long = if (dynamicGap) 1L else gapMicros
  override def slideMicros: Long = sizeMicros
  override def lastWindowStart(eventTime: Long): Long = eventTime
}
