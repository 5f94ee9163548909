package io.github.keyedwatermarks

import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.spec.{
  Closing, DurationOption, IdleClock, KeyClock, SkewBound, SkewOf, Unbounded, WatermarkSpec
}
import io.github.keyedwatermarks.planner.WatermarkPolicies
import io.github.keyedwatermarks.watermark._

class HeldWatermarkSuite extends AnyFunSuite {
  private val Undefined = HeldWatermark.Undefined

  private implicit class PolicyOf(w: WatermarkSpec) {
    def policy: WatermarkPolicy = WatermarkPolicies.of(w)
  }

  private implicit class SkewOfPolicy(p: WatermarkPolicy) {
    def maxSkewMicros: Option[Long] = p.floors.collectFirst { case SkewFloor(skew, _) => skew }
  }

  private def fixed(lateness: Long) = new HeldWatermark(WatermarkPolicy(lateness), HeldWatermark.freshRecord(lateness))

  /** One batch of rows with the bounded-lateness proposal. */
  private def batch(wm: HeldWatermark, lateness: Long, times: Long*): Long = {
    times.foreach(wm.observe)
    wm.advanceWithRows(wm.proposal(lateness), nowMs = 0L, globalWatermark = Undefined, arrivalMs = 0L)
  }

  test("undefined until the first row, then max event time minus lateness") {
    val wm = fixed(5L)
    assert(wm.record.watermark == Undefined)
    assert(batch(wm, 5L, 100L) == 95L)
  }

  test("never moves backward; a lower proposal is held and counted") {
    val wm = fixed(5L)
    assert(batch(wm, 5L, 100L, 40L, 120L) == 115L)
    assert(batch(wm, 5L, 7L, 119L) == 115L && wm.record.regressions == 0L, "a smaller max is no proposal below")
    assert(batch(wm, 50L, 121L) == 115L, "a larger lateness would move it back: held")
    assert(wm.record.regressions == 1L)
  }

  test("zero lateness and extreme values saturate instead of overflowing") {
    assert(batch(fixed(0L), 0L, Long.MinValue + 1) == Long.MinValue + 1)
    assert(batch(fixed(Long.MaxValue), Long.MaxValue, -10L) == Long.MinValue + 1)
  }

  test("a window is closed when its end <= watermark, never while undefined") {
    assert(!ClosedWindows.closedBy(Long.MinValue + 1, Undefined))
    assert(ClosedWindows.closedBy(10L, 10L))
    assert(!ClosedWindows.closedBy(11L, 10L))
  }

  test("processing-time watermark follows the batch clock, minus lateness") {
    val policy = WatermarkPolicy(2000000L, Proposal.ClockOnly, Seq(ProcessingTimeFloor(2000000L)))
    val wm = new HeldWatermark(policy, HeldWatermark.freshRecord(2000000L))
    assert(wm.applyFloors(nowMs = 10000L, globalWatermark = Undefined) == 8000000L)
    assert(wm.applyFloors(nowMs = 9000L, globalWatermark = Undefined) == 8000000L, "a clock going back is held")
  }

  test("advance_when_idle: after the timeout the watermark follows the wall clock, keeping its lag") {
    val policy =
      WatermarkPolicy(5000000L, floors = Seq(IdleAdvanceFloor(10000L)), idle = Some(IdleRule.AdvanceWhenIdle(10000L)))
    val wm = new HeldWatermark(policy, HeldWatermark.freshRecord(5000000L))
    wm.observe(100000000L)
    assert(wm.advanceWithRows(wm.proposal(5000000L), nowMs = 1000L, globalWatermark = Undefined,
      arrivalMs = 1000L) == 95000000L)
    assert(wm.applyFloors(nowMs = 11000L, globalWatermark = Undefined) == 95000000L, "not idle before the timeout")
    assert(wm.applyFloors(nowMs = 14000L, globalWatermark = Undefined) == 98000000L, "3 s idle: 3 s further")
  }

  test("max_skew holds a key at most that far behind the global watermark; global closing equals it") {
    val skew = new HeldWatermark(WatermarkPolicy(0L, floors = Seq(SkewFloor(10L, 0L))), HeldWatermark.freshRecord(0L))
    skew.observe(5L)
    assert(skew.advanceWithRows(skew.proposal(0L), 0L, globalWatermark = 100L, arrivalMs = 0L) == 90L)
    val global = new HeldWatermark(WatermarkPolicy(0L, Proposal.ClockOnly, Seq(GlobalWatermarkFloor)),
      HeldWatermark.freshRecord(0L))
    assert(global.applyFloors(0L, globalWatermark = 77L) == 77L)
  }

  test("max_skew: a key with a larger lateness of its own may trail by that much more, never by less") {
    val policy = WatermarkPolicy(5L, Proposal.OwnRows(ColumnLateness), Seq(SkewFloor(10L, 5L)))
    val slow = HeldWatermark.freshRecord(5L)
    slow.latenessMicros = 35L
    assert(new HeldWatermark(policy, slow).applyFloors(0L, globalWatermark = 100L) == 100L - 10L - 30L)
    val quick = HeldWatermark.freshRecord(5L)
    quick.latenessMicros = 1L
    assert(new HeldWatermark(policy, quick).applyFloors(0L, globalWatermark = 100L) == 90L)
  }

  private def spec(change: WatermarkSpec => WatermarkSpec = identity) =
    change(WatermarkSpec(Seq("k"), "ts", DurationOption("lateness", "0 seconds")))

  test(
    "closing='fleet': the skew learnt when the key's max moves, the floor behind Spark's watermark (capped at the key's max), end only") {
    val spec = WatermarkSpec(Seq("k"), "t", DurationOption("lateness", "0 seconds"), maxSkew = SkewOf(100L),
      closing = Closing.Fleet)
    val policy = spec.policy
    val fleet = policy.fleet.get
    assert(policy.proposal == Proposal.ClockOnly && fleet == FleetFloor(100L, 0L) && policy.maxSkewMicros.contains(
      100L))
    val wm = new HeldWatermark(policy, HeldWatermark.freshRecord(spec.lateness.micros))
    wm.observe(1000L)
    fleet.learn(wm.record, maxBefore = Undefined, global = 1030L) // the key's watermark (its max) trails E by 30
    assert(wm.record.fleetSkew == 30L && wm.record.fleetReference == 1030L)
    assert(wm.advanceWithRows(Undefined, nowMs = 0L, globalWatermark = 1030L, arrivalMs = 0L) == 1000L,
      "E - 30, capped at the max")
    assert(wm.applyFloors(0L, 5000L) == 4900L, "at the start only E - max_skew applies")
    assert(wm.advanceWithoutRows(Undefined, 0L, 5000L) == 4900L,
      "the fleet floor (capped at the max, 1000) is below E - max_skew")
    assert(fleet.floor(wm.record, 0L, 1010L) == 980L && fleet.floor(wm.record, 0L, 9000L) == 1000L,
      "E - skew, capped at the max event time")
    wm.observe(500L) // a retransmitted old row: the max stays, and so does the skew
    fleet.learn(wm.record, maxBefore = 1000L, global = 2000L)
    assert(wm.record.fleetSkew == 30L && wm.record.fleetReference == 1030L)
    wm.observe(1180L) // 10 behind E: the skew decays by (1190 - 1030) / 16 = 10, to 20 (more than 10)
    fleet.learn(wm.record, maxBefore = 1000L, global = 1190L)
    assert(wm.record.fleetSkew == 20L && wm.record.fleetReference == 1190L)
    wm.observe(1200L) // the key's own watermark at E: in step, the skew is forgotten at once
    fleet.learn(wm.record, maxBefore = 1180L, global = 1200L)
    assert(wm.record.fleetSkew == 0L && wm.record.fleetReference == 1200L, "in step: 0")
    wm.observe(1250L)
    fleet.learn(wm.record, maxBefore = 1200L, global = 1260L)
    assert(wm.record.fleetSkew == 10L, "behind again: 10")
    wm.observe(7000L)
    fleet.learn(wm.record, maxBefore = 1250L, global = 2000L)
    assert(wm.record.fleetSkew == 0L, "ahead of E: 0")
    wm.observe(7002L)
    fleet.learn(wm.record, maxBefore = 7000L, global = 9000L)
    assert(wm.record.fleetSkew == 100L, "at most max_skew")
    assert(fleet.reaches(950L, wm.record).contains(2L) && fleet.reaches(8000L, wm.record).isEmpty)
    val late = HeldWatermark.freshRecord(10L)
    late.maxEventTime = 1000L
    FleetFloor(100L, 10L).learn(late, maxBefore = Undefined, global = 1000L)
    assert(late.fleetSkew == 10L, "the key's own watermark is its max minus the lateness: 10 behind E")
    wm.record.watermark = 1500L
    assert(!policy.releasable(wm.record, 0L, 1550L) && policy.releasable(wm.record, 0L, 1600L),
      "a key without windows leaves once E - max_skew reaches its watermark")
    assert(WatermarkSpec(Seq("k"), "t", DurationOption("lateness", "1 second")).policy.releasable(wm.record, 0L, 1550L))
  }

  test("the default skew bound: an hour, unless a processing-time policy or closing='global' is used") {
    val idle = Some(DurationOption("idle_timeout", "1 second"))
    assert(spec().policy.maxSkewMicros.contains(3600L * 1000 * 1000))
    assert(spec(_.copy(maxSkew = Unbounded)).policy.maxSkewMicros.isEmpty)
    assert(spec(_.copy(idleTimeout = idle)).policy.maxSkewMicros.isEmpty)
    assert(spec(_.copy(idleTimeout = idle, idleClock = Some(IdleClock.ProcessingTime))).policy.maxSkewMicros.isEmpty)
    assert(spec(_.copy(clock = KeyClock.ProcessingTime)).policy.maxSkewMicros.isEmpty)
    assert(spec(_.copy(closing = Closing.Global)).policy.maxSkewMicros.isEmpty)
    assert(SkewBound.parse("unbounded") == Unbounded && SkewBound.parse("2 seconds") == SkewOf(2000000L))
  }

  test("each option becomes its components; the time mode follows from the floors' clocks") {
    val idle = Some(DurationOption("idle_timeout", "1 second"))
    val wall = Some(IdleClock.ProcessingTime)
    val emit = spec(_.copy(idleTimeout = idle, idleClock = wall)).policy
    assert(emit.idle.contains(IdleRule.EmitWhenIdle(1000L)) && emit.floors.isEmpty)
    assert(emit.usesProcessingTimers && !emit.usesGlobalWatermark && !emit.releasesKeysWithoutWindows)
    // The arrival clock (the default): event-time timers on Spark's watermark over the arrival time.
    val arrival = spec(_.copy(idleTimeout = idle)).policy
    assert(arrival.idle.contains(IdleRule.EmitWhenIdle(1000L)) && arrival.floors.isEmpty)
    assert(arrival.usesArrivalClock && arrival.usesClockTimers && !arrival.usesProcessingTimers)
    assert(!arrival.usesGlobalWatermark && !arrival.releasesKeysWithoutWindows)
    val onArrival = spec(_.copy(idleTimeout = idle, advanceWhenIdle = true)).policy
    assert(onArrival.floors == Seq(IdleAdvanceFloor(1000L, ArrivalClock)))
    val advance = spec(_.copy(idleTimeout = idle, advanceWhenIdle = true, idleClock = wall)).policy
    assert(advance.idle.contains(IdleRule.AdvanceWhenIdle(1000L)) && advance.floors == Seq(IdleAdvanceFloor(1000L)))
    assert(!advance.releasesKeysWithoutWindows, "an idle key's own wall-clock advance does not cover a returning key")
    val global = spec(_.copy(closing = Closing.Global)).policy
    assert(global.proposal == Proposal.ClockOnly && global.floors == Seq(GlobalWatermarkFloor))
    assert(global.usesGlobalWatermark && !global.usesProcessingTimers && global.releasesKeysWithoutWindows)
    val unbounded = spec(_.copy(maxSkew = Unbounded)).policy
    assert(unbounded.floors.isEmpty && !unbounded.usesGlobalWatermark && !unbounded.releasesKeysWithoutWindows)
  }

  test("a floor's timer is when its clock lets the floor reach the threshold") {
    val record = HeldWatermark.freshRecord(5000L)
    val floors = Seq(ProcessingTimeFloor(2000L), GlobalWatermarkFloor, SkewFloor(10000L, 1000L))
    // reaches(t) is the least clock value (ms) whose floor is >= t
    for (floor <- floors; t <- Seq(-3001L, 0L, 1L, 999L, 1000L, 123456789L)) {
      val at = floor.reaches(t, record).get
      val clockMicros = (ms: Long) => ms * 1000L
      def floorAt(ms: Long) = floor.clock match {
        case ProcessingTimeClock | ArrivalClock => floor.floor(record, ms, Undefined)
        case EventTimeClock => floor.floor(record, 0L, clockMicros(ms))
      }
      assert(floorAt(at) >= t, s"$floor at $at does not reach $t")
      assert(floorAt(at - 1) < t, s"$floor reaches $t before $at")
    }
  }
}
