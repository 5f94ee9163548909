package io.github.keyedwatermarks.watermark

/**
 * The watermark of one key: it is *held*, i.e. it never moves backward. In each micro-batch
 * the policy ([[WatermarkPolicy]]) proposes a value from the key's own rows (its max event
 * time minus its lateness, or the min over its sources); a proposal below the held watermark
 * is not applied but counted as an attempted regression. Floors that follow a clock (processing
 * time, idle advance, Spark's global watermark for max_skew / closing='global') raise it
 * without counting.
 *
 * Only the key's own rows (and those clocks) move it: other keys never do.
 */
final class KeyWatermark(policy: WatermarkPolicy, val state: KeyWatermarkState) {
  import KeyWatermark._

  /** The held watermark, or [[KeyWatermark.Undefined]]. */
  def current: Long = state.watermark

  def maxEventTimeSeen: Long = state.maxEventTime

  def observe(eventTime: Long): Unit = if (eventTime > state.maxEventTime) state.maxEventTime = eventTime

  /**
   * Raises the watermark to the clock-driven floors at processing time `nowMs` with Spark's
   * global watermark `globalWatermark` (micros, Undefined if none); returns the watermark.
   */
  def applyFloors(nowMs: Long, globalWatermark: Long): Long = {
    raise(floor(nowMs, globalWatermark))
    state.watermark
  }

  private def floor(nowMs: Long, global: Long): Long = {
    var f = Undefined
    if (policy.processingTime) f = max(f, saturatingMinus(Math.multiplyExact(nowMs, 1000L), policy.latenessMicros))
    if (policy.globalClosing) f = max(f, global)
    // A key with a larger lateness of its own (per-key or adaptive) may trail by that much more;
    // never less than the skew itself, so the floor of a key that returns after leaving state
    // (default lateness) is at least the floor that released it.
    policy.maxSkewMicros.foreach { skew =>
      if (global != Undefined) {
        val extra = math.max(0L, state.latenessMicros - policy.latenessMicros)
        f = max(f, saturatingMinus(saturatingMinus(global, skew), extra))
      }
    }
    if (policy.advanceWhenIdle && state.lastArrivalMs != NoArrival && state.arrivalWatermark != Undefined) {
      val idleFor = nowMs - state.lastArrivalMs - policy.idleTimeoutMillis.get
      if (idleFor > 0) f = max(f, state.arrivalWatermark + idleFor * 1000L)
    }
    f
  }

  /**
   * End of a micro-batch in which the key had rows: applies the policy's proposal (counting an
   * attempted regression) and the floors, and records the arrival. Returns the watermark.
   */
  def advanceWithRows(proposal: Long, nowMs: Long, globalWatermark: Long): Long = {
    if (proposal != Undefined) {
      if (state.watermark != Undefined && proposal < state.watermark) state.regressions += 1
      raise(proposal)
    }
    raise(floor(nowMs, globalWatermark))
    state.lastArrivalMs = nowMs
    state.arrivalWatermark = state.watermark
    state.quietSinceMs = NoArrival
    state.watermark
  }

  /** Without rows (a timer): a changed proposal (e.g. a source went idle) and the floors. */
  def advanceWithoutRows(proposal: Long, nowMs: Long, globalWatermark: Long): Long = {
    raise(proposal)
    raise(floor(nowMs, globalWatermark))
    state.watermark
  }

  /** The event-time proposal `max event time - lateness` (Undefined before the first row). */
  def proposal(latenessMicros: Long): Long =
    if (state.maxEventTime == Undefined) Undefined else saturatingMinus(state.maxEventTime, latenessMicros)

  /**
   * Raises the watermark without counting (idle_timeout: windows emitted because the key went
   * idle are final, so the watermark moves past them and their rows are late from then on).
   */
  def raise(candidate: Long): Unit = if (candidate > state.watermark) state.watermark = candidate
}

/** One key's watermark record, as kept in the state store (see state.KeyState). */
final class KeyWatermarkState(
    var maxEventTime: Long,
    var watermark: Long,
    var arrivalWatermark: Long,
    var lastArrivalMs: Long,
    var latenessMicros: Long,
    var lateRows: Long,
    var regressions: Long,
    /**
     * idle_timeout: the processing time (ms) since which the idle key has had no open window
     * left (it is forgotten idle_timeout later); [[KeyWatermark.NoArrival]] otherwise.
     */
    var quietSinceMs: Long)

object KeyWatermark {
  /** Sentinel for "no watermark yet": below every real watermark. */
  val Undefined: Long = Long.MinValue
  val NoArrival: Long = Long.MinValue

  def fresh(latenessMicros: Long): KeyWatermarkState =
    new KeyWatermarkState(Undefined, Undefined, Undefined, NoArrival, latenessMicros, 0L, 0L, NoArrival)

  @inline def max(a: Long, b: Long): Long = if (a > b) a else b

  def saturatingMinus(a: Long, b: Long): Long = {
    if (a == Undefined) return Undefined
    val r = a - b
    if (((a ^ b) & (a ^ r)) < 0) Long.MinValue + 1 else r
  }
}

/** When a window (by its end) is closed for a key's watermark: `end <= watermark`. */
object LateRowPolicy {
  /** A row is late if its window was already closed by the watermark at the start of the batch. */
  def isClosed(windowEnd: Long, watermark: Long): Boolean =
    watermark != KeyWatermark.Undefined && windowEnd <= watermark
}
