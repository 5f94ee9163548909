package io.github.keyedwatermarks.input

/**
 * The most sliding windows one row may fall in (size / slide, rounded up). Spark plans
 * `window(ts, size, slide)` as one projection per window a row can fall in, and so does the
 * reference aggregation this library analyzes when a query is defined: at 10 million windows
 * per row (`slide="1 microsecond"` on 10-second windows) the driver ran out of heap before any
 * query started. Defining a query with 1,000 windows per row takes a few seconds; each row is
 * then aggregated 1,000 times.
 */
object WindowsPerRow {
  val Max: Long = 1000L

  /** Fails, naming the options, when `size` / `slide` (microseconds) exceeds [[Max]]. */
  def check(sizeMicros: Long, slideMicros: Long, size: String, slide: String): Unit = {
    val windows = (sizeMicros + slideMicros - 1) / slideMicros
    if (windows > Max) throw new IllegalArgumentException(
      s"slide: '$slide' on windows of '$size' puts each row in $windows windows (window size / slide); " +
        s"at most $Max are supported: use a larger slide")
  }
}
