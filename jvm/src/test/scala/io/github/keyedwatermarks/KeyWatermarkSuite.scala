package io.github.keyedwatermarks

import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.watermark.{KeyWatermark, LateRowPolicy}

class KeyWatermarkSuite extends AnyFunSuite {

  test("undefined until the first row, then max event time minus lateness") {
    val wm = new KeyWatermark(5L)
    assert(!wm.isDefined && wm.current == KeyWatermark.Undefined)
    wm.observe(100L)
    assert(wm.isDefined && wm.current == 95L)
  }

  test("never moves backward") {
    val wm = new KeyWatermark(5L)
    Seq(100L, 40L, 120L, 7L, 119L).foreach(wm.observe)
    assert(wm.current == 115L && wm.maxEventTimeSeen == 120L)
  }

  test("zero lateness and extreme values") {
    val wm = new KeyWatermark(0L)
    wm.observe(Long.MinValue + 1)
    assert(wm.current == Long.MinValue + 1)
    val wide = new KeyWatermark(Long.MaxValue)
    wide.observe(-10L)
    assert(wide.current == Long.MinValue + 1, "saturates instead of overflowing")
  }

  test("a window is closed when its end <= watermark, never while undefined") {
    assert(!LateRowPolicy.isClosed(Long.MinValue + 1, KeyWatermark.Undefined))
    assert(LateRowPolicy.isClosed(10L, 10L))
    assert(!LateRowPolicy.isClosed(11L, 10L))
  }

  test("restored from state, it continues from the stored maximum") {
    val wm = new KeyWatermark(5L, 50L)
    wm.observe(30L)
    assert(wm.current == 45L)
  }
}
