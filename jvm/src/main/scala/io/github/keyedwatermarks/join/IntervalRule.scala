package io.github.keyedwatermarks.join

import io.github.keyedwatermarks.spec.OptionError

/**
 * The keyed interval join's rule for one key, without Spark (docs/semantics.md, "Interval
 * join"). Times are microseconds. A right row at `r` matches a left row at `l` when
 * `l - before <= r <= l + after`. Each side of a key has its own watermark, its max time minus
 * `lateness`: a row below its side's watermark is late, and a row leaves the state once the
 * *other* side's watermark has passed every time it could match, so no on-time row ever misses
 * a match that eviction removed.
 */
private[keyedwatermarks] object IntervalRule {

  /** Which rows come out: matched pairs only, or also each left row that never matched. */
  sealed trait Kind { def name: String }
  object Kind {
    case object Inner extends Kind { val name = "inner" }

    /** A left row that leaves the state without a match comes out once, with no right row. */
    case object LeftOuter extends Kind { val name = "left_outer" }
    val all: Seq[Kind] = Seq(Inner, LeftOuter)
    def parse(text: String): Kind = OptionError.choice("how", text, all)(_.name)
  }

  final case class Bounds(beforeMicros: Long, afterMicros: Long, latenessMicros: Long) {
    def matches(left: Long, right: Long): Boolean = left - beforeMicros <= right && right <= left + afterMicros

    /** Below its side's watermark (`max` of that side's earlier batches - lateness): late. */
    def late(t: Long, max: Option[Long]): Boolean = max.exists(m => t < m - latenessMicros)

    /** A left row no on-time right row can match any more: the right watermark is past `l + after`. */
    def leftDone(left: Long, maxRight: Option[Long]): Boolean =
      maxRight.exists(m => left + afterMicros < m - latenessMicros)

    /** A right row no on-time left row can match any more: the left watermark is past `r + before`. */
    def rightDone(right: Long, maxLeft: Option[Long]): Boolean =
      maxLeft.exists(m => right + beforeMicros < m - latenessMicros)
  }

  /** The indices of the ascending `times` within `[lo, hi]` (binary search for the first). */
  def within(times: IndexedSeq[Long], lo: Long, hi: Long): Iterator[Int] = {
    var a = 0
    var b = times.length
    while (a < b) {
      val mid = (a + b) >>> 1
      if (times(mid) >= lo) b = mid else a = mid + 1
    }
    Iterator.from(a).takeWhile(i => i < times.length && times(i) <= hi)
  }
}
