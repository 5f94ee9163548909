package io.github.keyedwatermarks

import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.join.AsOfRule
import io.github.keyedwatermarks.join.AsOfRule.Version

/** The as-of rule's binary searches against their linear definitions, on random sorted vectors. */
class AsOfRuleSuite extends AnyFunSuite {
  private val rnd = new scala.util.Random(11)

  /** Time-sorted versions, one per time, from a small range so that lookups hit and miss. */
  private def versions(): Vector[Version[Int]] =
    Seq.fill(rnd.nextInt(12))(rnd.nextInt(40).toLong - 20).distinct.sorted.zipWithIndex
      .map { case (t, i) => Version(t, i) }.toVector

  private val probes = (-25L to 25L) ++ Seq(Long.MinValue, Long.MaxValue)

  test("the version valid at t is the newest at or before it") {
    for (_ <- 1 to 300; vs = versions(); t <- probes)
      assert(AsOfRule.validAt(vs, t) == vs.reverseIterator.find(_.time <= t), (vs, t))
  }

  test("put keeps time order, one version per time, a later one at the same time replacing it") {
    for (_ <- 1 to 300; vs = versions(); t <- probes) {
      val v = Version(t, -1)
      val linear = {
        val i = vs.indexWhere(_.time >= t)
        if (i < 0) vs :+ v else if (vs(i).time == t) vs.updated(i, v) else vs.patch(i, Seq(v), 0)
      }
      val put = AsOfRule.put(vs, v)
      assert(put == linear, (vs, t))
      assert(put.map(_.time) == (vs.map(_.time) :+ t).distinct.sorted)
    }
  }

  test("prune keeps what is after the horizon and the newest at or before it") {
    for (_ <- 1 to 300; vs = versions(); m <- Seq(-30L, -5L, 0L, 7L, 30L); held <- Seq(Nil, List(3L), List(-12L, 9L))) {
      val horizon = (held :+ (m - 4L)).min
      val atOrBefore = vs.lastIndexWhere(_.time <= horizon)
      val linear = if (atOrBefore <= 0) vs else vs.drop(atOrBefore)
      assert(AsOfRule.prune(vs, Some(m), 4L, held) == linear, (vs, m, held))
      assert(AsOfRule.prune(vs, None, 4L, held) == vs)
    }
  }
}
