package io.github.keyedwatermarks

import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.watermark._

class KeyWatermarkSuite extends AnyFunSuite {
  private val Undefined = KeyWatermark.Undefined

  private def fixed(lateness: Long) = new KeyWatermark(WatermarkPolicy(lateness), KeyWatermark.fresh(lateness))

  /** One batch of rows with the bounded-lateness proposal. */
  private def batch(wm: KeyWatermark, lateness: Long, times: Long*): Long = {
    times.foreach(wm.observe)
    wm.advanceWithRows(wm.proposal(lateness), nowMs = 0L, globalWatermark = Undefined)
  }

  test("undefined until the first row, then max event time minus lateness") {
    val wm = fixed(5L)
    assert(wm.current == Undefined)
    assert(batch(wm, 5L, 100L) == 95L)
  }

  test("never moves backward; a lower proposal is held and counted") {
    val wm = fixed(5L)
    assert(batch(wm, 5L, 100L, 40L, 120L) == 115L)
    assert(batch(wm, 5L, 7L, 119L) == 115L && wm.state.regressions == 0L, "a smaller max is no proposal below")
    assert(batch(wm, 50L, 121L) == 115L, "a larger lateness would move it back: held")
    assert(wm.state.regressions == 1L)
  }

  test("zero lateness and extreme values saturate instead of overflowing") {
    assert(batch(fixed(0L), 0L, Long.MinValue + 1) == Long.MinValue + 1)
    assert(batch(fixed(Long.MaxValue), Long.MaxValue, -10L) == Long.MinValue + 1)
  }

  test("a window is closed when its end <= watermark, never while undefined") {
    assert(!LateRowPolicy.isClosed(Long.MinValue + 1, Undefined))
    assert(LateRowPolicy.isClosed(10L, 10L))
    assert(!LateRowPolicy.isClosed(11L, 10L))
  }

  test("processing-time watermark follows the batch clock, minus lateness") {
    val policy = WatermarkPolicy(2000000L, processingTime = true)
    val wm = new KeyWatermark(policy, KeyWatermark.fresh(2000000L))
    assert(wm.applyFloors(nowMs = 10000L, globalWatermark = Undefined) == 8000000L)
    assert(wm.applyFloors(nowMs = 9000L, globalWatermark = Undefined) == 8000000L, "a clock going back is held")
  }

  test("advance_when_idle: after the timeout the watermark follows the wall clock, keeping its lag") {
    val policy = WatermarkPolicy(5000000L, idleTimeoutMillis = Some(10000L), advanceWhenIdle = true)
    val wm = new KeyWatermark(policy, KeyWatermark.fresh(5000000L))
    wm.observe(100000000L)
    assert(wm.advanceWithRows(wm.proposal(5000000L), nowMs = 1000L, globalWatermark = Undefined) == 95000000L)
    assert(wm.applyFloors(nowMs = 11000L, globalWatermark = Undefined) == 95000000L, "not idle before the timeout")
    assert(wm.applyFloors(nowMs = 14000L, globalWatermark = Undefined) == 98000000L, "3 s idle: 3 s further")
  }

  test("max_skew holds a key at most that far behind the global watermark; global closing equals it") {
    val skew = new KeyWatermark(WatermarkPolicy(0L, maxSkew = SkewOf(10L)), KeyWatermark.fresh(0L))
    skew.observe(5L)
    assert(skew.advanceWithRows(skew.proposal(0L), 0L, globalWatermark = 100L) == 90L)
    val global = new KeyWatermark(WatermarkPolicy(0L, globalClosing = true), KeyWatermark.fresh(0L))
    assert(global.applyFloors(0L, globalWatermark = 77L) == 77L)
  }

  test("max_skew: a key with a larger lateness of its own may trail by that much more, never by less") {
    val policy = WatermarkPolicy(5L, lateness = ColumnLateness, maxSkew = SkewOf(10L))
    val slow = KeyWatermark.fresh(5L)
    slow.latenessMicros = 35L
    assert(new KeyWatermark(policy, slow).applyFloors(0L, globalWatermark = 100L) == 100L - 10L - 30L)
    val quick = KeyWatermark.fresh(5L)
    quick.latenessMicros = 1L
    assert(new KeyWatermark(policy, quick).applyFloors(0L, globalWatermark = 100L) == 90L)
  }

  test("the default skew bound: an hour, unless a processing-time policy or closing='global' is used") {
    assert(WatermarkPolicy(0L).maxSkewMicros.contains(3600L * 1000 * 1000))
    assert(WatermarkPolicy(0L, maxSkew = Unbounded).maxSkewMicros.isEmpty)
    assert(WatermarkPolicy(0L, idleTimeoutMillis = Some(1000L)).maxSkewMicros.isEmpty)
    assert(WatermarkPolicy(0L, processingTime = true).maxSkewMicros.isEmpty)
    assert(WatermarkPolicy(0L, globalClosing = true).maxSkewMicros.isEmpty)
    val explicit = intercept[IllegalArgumentException](
      WatermarkPolicy(0L, idleTimeoutMillis = Some(1000L), maxSkew = SkewOf(1L)).validate())
    assert(explicit.getMessage.contains("max_skew"))
    assert(SkewBound.parse("unbounded") == Unbounded && SkewBound.parse("2 seconds") == SkewOf(2000000L))
  }
}
