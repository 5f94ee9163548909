package io.github.keyedwatermarks

import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.join.IntervalRule
import io.github.keyedwatermarks.join.IntervalRule.{Bounds, Kind}

/** The interval rule's binary search against its linear definition, and its bounds at their edges. */
class IntervalRuleSuite extends AnyFunSuite {
  private val rnd = new scala.util.Random(13)

  test("within gives the indices of the ascending times inside [lo, hi], bounds included") {
    for (_ <- 1 to 500) {
      val times = Vector.fill(rnd.nextInt(10))(rnd.nextInt(30).toLong - 15).sorted // duplicates too
      val lo = rnd.nextInt(40).toLong - 20
      val hi = lo + rnd.nextInt(12) - 2 // sometimes empty (hi < lo)
      assert(IntervalRule.within(times, lo, hi).toList == times.indices.filter(i => times(i) >= lo && times(i) <= hi),
        (times, lo, hi))
    }
  }

  test("a right row matches from `before` before to `after` after the left row, both included") {
    val b = Bounds(beforeMicros = 10, afterMicros = 30, latenessMicros = 5)
    assert(b.matches(100, 90) && b.matches(100, 130) && b.matches(100, 100))
    assert(!b.matches(100, 89) && !b.matches(100, 131))
  }

  test("late below the side's max - lateness; done once the other side's watermark is past the bound") {
    val b = Bounds(beforeMicros = 10, afterMicros = 30, latenessMicros = 5)
    assert(!b.late(95, None) && !b.late(95, Some(100)) && b.late(94, Some(100)))
    // A left row at 100 can match right rows up to 130: done when the right watermark passes 130.
    assert(!b.leftDone(100, None) && !b.leftDone(100, Some(135)) && b.leftDone(100, Some(136)))
    // A right row at 100 can match left rows up to 110: done when the left watermark passes 110.
    assert(!b.rightDone(100, Some(115)) && b.rightDone(100, Some(116)))
  }

  test("how: inner or left_outer, anything else refused naming the option and the choices") {
    assert(Kind.parse("inner") == Kind.Inner && Kind.parse("left_outer") == Kind.LeftOuter)
    val e = intercept[IllegalArgumentException](Kind.parse("full"))
    assert(e.getMessage == "how: expected 'inner' or 'left_outer', got 'full'")
  }
}
