package io.github.keyedwatermarks.join

/**
 * The as-of join's rule for one key, without Spark (docs/semantics.md, "As-of join"): which
 * held readings the versions watermark releases, the version valid at a time, and the key's
 * state horizon. Times are microseconds; a key's versions are sorted by time, one per time.
 */
private[keyedwatermarks] object AsOfRule {

  /** A version: its time and its row (any payload). */
  final case class Version[V](time: Long, row: V)

  /**
   * The index of the first of the time-sorted `versions` whose time satisfies `after`, a
   * predicate false up to some time and true from it on (else `versions.length`): a binary
   * search, since a key's vector grows with its versions inside the horizon and every reading
   * looks one up.
   */
  private def firstWhere[V](versions: Vector[Version[V]])(after: Long => Boolean): Int = {
    var lo = 0
    var hi = versions.length
    while (lo < hi) {
      val mid = (lo + hi) >>> 1
      if (after(versions(mid).time)) hi = mid else lo = mid + 1
    }
    lo
  }

  /** `versions` with `v` put in time order; a version at the same time is replaced (a correction). */
  def put[V](versions: Vector[Version[V]], v: Version[V]): Vector[Version[V]] = {
    val i = firstWhere(versions)(_ >= v.time)
    if (i == versions.length) versions :+ v
    else if (versions(i).time == v.time) versions.updated(i, v)
    else versions.patch(i, Seq(v), 0)
  }

  /** The version valid at `t`: the newest at or before it. */
  def validAt[V](versions: Vector[Version[V]], t: Long): Option[Version[V]] = {
    val n = firstWhere(versions)(_ > t)
    if (n == 0) None else Some(versions(n - 1))
  }

  /** Whether the versions watermark (ms, Spark's; <= 0: none yet) releases a reading at `t`. */
  def released(t: Long, versionsWatermarkMs: Long): Boolean =
    versionsWatermarkMs > 0 && t <= versionsWatermarkMs * 1000L

  /** The event-time timer (ms) that fires once the versions watermark releases a reading at `t`. */
  def timerMs(t: Long): Long = Math.floorDiv(t + 999L, 1000L)

  /** Whether a reading at `t` is late for its key: below `max reading time - lateness` of earlier batches. */
  def late(t: Long, maxReading: Option[Long], latenessMicros: Long): Boolean =
    maxReading.exists(m => t < m - latenessMicros)

  /**
   * The key's versions pruned to its horizon `min(max reading - lateness, oldest held
   * reading)`: those after it, and of those at or before it only the newest. All are kept
   * until the key has had a reading.
   */
  def prune[V](versions: Vector[Version[V]], maxReading: Option[Long], latenessMicros: Long,
      heldTimes: Iterable[Long]): Vector[Version[V]] = maxReading match {
    case None => versions
    case Some(m) =>
      val horizon = (heldTimes.iterator ++ Iterator.single(m - latenessMicros)).min
      val atOrBefore = firstWhere(versions)(_ > horizon) - 1 // the newest at or before it
      if (atOrBefore <= 0) versions else versions.drop(atOrBefore)
  }
}
