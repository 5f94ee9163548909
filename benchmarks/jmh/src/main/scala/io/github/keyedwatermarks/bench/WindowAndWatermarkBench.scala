package io.github.keyedwatermarks.bench

import java.util.concurrent.TimeUnit

import org.openjdk.jmh.annotations._

import io.github.keyedwatermarks.watermark.{ClosedWindows, HeldWatermark, WatermarkPolicy}
import io.github.keyedwatermarks.window.{TumblingWindows, WindowAssigner}

/**
 * Per-row event-time arithmetic: window assignment and the per-key watermark. Each invocation
 * handles [[EventTimes.Rows]] rows (see @OperationsPerInvocation), so the score is ns per row.
 */
@State(Scope.Thread)
@BenchmarkMode(Array(Mode.AverageTime))
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 2, time = 2, timeUnit = TimeUnit.SECONDS)
@Measurement(iterations = 3, time = 2, timeUnit = TimeUnit.SECONDS)
@Fork(1)
class WindowAndWatermarkBench {

  private val windows = TumblingWindows(EventTimes.WindowMicros)
  private val latenessMicros = 5L * 1000 * 1000
  private var times: Array[Long] = _

  @Setup(Level.Trial)
  def setup(): Unit = times = EventTimes.mostlyInOrder(EventTimes.Rows, seed = 1)

  /** TumblingWindows.lastWindowStart for each row. */
  @Benchmark
  @OperationsPerInvocation(1024)
  def windowStart(): Long = {
    var acc = 0L
    var i = 0
    while (i < times.length) { acc += windows.lastWindowStart(times(i)); i += 1 }
    acc
  }

  /** HeldWatermark.observe for each row of a key, then current (one key, one batch). */
  @Benchmark
  @OperationsPerInvocation(1024)
  def watermarkObserve(): Long = {
    val wm = fresh()
    var i = 0
    while (i < times.length) { wm.observe(times(i)); i += 1 }
    wm.proposal(latenessMicros)
  }

  /** HeldWatermark.current after each observe (what a per-row lateness check would need). */
  @Benchmark
  @OperationsPerInvocation(1024)
  def watermarkObserveCurrent(): Long = {
    val wm = fresh()
    var acc = 0L
    var i = 0
    while (i < times.length) { wm.observe(times(i)); acc += wm.proposal(latenessMicros); i += 1 }
    acc
  }

  /**
   * The whole per-row event-time step: window of the row, late check against the watermark at
   * the start of the batch, watermark advance.
   */
  @Benchmark
  @OperationsPerInvocation(1024)
  def windowLateCheckObserve(): Long = {
    val wm = fresh()
    wm.observe(times(times.length / 2))
    val atStart = wm.proposal(latenessMicros)
    var late = 0L
    var i = 0
    while (i < times.length) {
      val t = times(i)
      if (ClosedWindows.closedBy(windows.windowEnd(windows.lastWindowStart(t)), atStart)) late += 1
      wm.observe(t)
      i += 1
    }
    late + wm.proposal(latenessMicros)
  }

  private def fresh() = new HeldWatermark(WatermarkPolicy(latenessMicros), HeldWatermark.freshRecord(latenessMicros))
}

object EventTimes {
  final val Rows = 1024
  val WindowMicros: Long = 10L * 1000 * 1000
  /** 2025-01-01T00:00:00Z in microseconds. */
  val Origin: Long = 1735689600L * 1000 * 1000

  /** One reading per 100 ms, each jittered by up to +-2 s: mostly in order, a little out of order. */
  def mostlyInOrder(n: Int, seed: Long): Array[Long] = {
    val rnd = new java.util.Random(seed)
    Array.tabulate(n)(i => Origin + i * 100000L + (rnd.nextInt(4000001) - 2000000).toLong)
  }
}
