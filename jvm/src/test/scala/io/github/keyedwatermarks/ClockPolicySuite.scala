package io.github.keyedwatermarks

import java.sql.Timestamp

import org.apache.spark.sql.{DataFrame, Encoders, Row}
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
import org.apache.spark.sql.functions._
import org.apache.spark.sql.kwtest.ManualClockQuery

case class SourcedEvent(device: String, src: String, ts: Timestamp, temp: Double)

/**
 * Watermark policies that follow a clock (docs/semantics.md), with a controllable trigger
 * clock: every step advances processing time by one second and runs one micro-batch.
 */
class ClockPolicySuite extends SparkSuite {

  private def t(seconds: Long) = new Timestamp(seconds * 1000L)
  private def windows(rows: Seq[Row]): Set[(String, Long, Long)] = rows.filter(_.getAs[String]("kw_kind") == "window")
    .map(r => (r.getString(0), r.getStruct(1).getTimestamp(0).getTime / 1000, r.getLong(2))).toSet
  private def lateRows(rows: Seq[Row]): Long =
    rows.filter(_.getAs[String]("kw_kind") == "late").map(_.getAs[Long]("kw_late_rows")).sum

  private def query(df: DataFrame, startMillis: Long)(configure: KeyedWatermark => KeyedWatermark) = {
    val out = configure(KeyedWatermarks(df, Seq("device"), "ts", "5 seconds"))
      .window("10 seconds").aggWithReport(count(lit(1)).as("n"))
    new ManualClockQuery(out, tempDir(), startMillis)
  }

  /** Steps until `done` holds (at most `max` steps); returns the clock then. */
  private def stepUntil(q: ManualClockQuery, max: Int)(done: => Boolean): Long = {
    var steps = 0
    while (!done && steps < max) { q.step(); steps += 1 }
    assert(done, s"not reached within $max steps")
    q.clock.getTimeMillis()
  }

  test("clock='processing_time': wm = batch processing time - lateness; windows close on the wall clock") {
    val input = MemoryStream[Event](Encoders.product[Event], spark)
    val q = query(input.toDF(), 100000L)(_.withProcessingTime())
    try {
      input.addData(Event("a", t(100), 1.0), Event("a", t(103), 1.0), Event("a", t(85), 1.0))
      q.step() // processing time 101 s: wm = 96 s; [80, 90) is closed, [100, 110) is open
      assert(lateRows(q.rows) == 1L && windows(q.rows).isEmpty)
      val at = stepUntil(q, 30)(windows(q.rows).nonEmpty)
      assert(windows(q.rows) == Set(("a", 100L, 2L)))
      assert(at == 115000L, s"[100, 110) closes when processing time - 5 s reaches 110 s, at 115 s; got $at")
    } finally q.stop()
  }

  test("advance_when_idle: a silent key's watermark follows the wall clock after the timeout, keeping its lag") {
    val input = MemoryStream[Event](Encoders.product[Event], spark)
    val q = query(input.toDF(), 0L)(_.withIdleClock("processing_time").withIdleTimeout("10 seconds", advance = true))
    try {
      input.addData(Event("a", t(100), 1.0))
      q.step() // at 1 s: wm(a) = 95 s; [100, 110) needs 15 s more after 10 s of silence
      val at = stepUntil(q, 40)(windows(q.rows).nonEmpty)
      assert(at == 26000L, s"expected at 1 + 10 + 15 s, got $at ms")
      assert(windows(q.rows) == Set(("a", 100L, 1L)))
      input.addData(Event("a", t(105), 1.0)) // the key kept its (advanced) watermark: late now
      q.step()
      assert(lateRows(q.rows) == 1L)
    } finally q.stop()
  }

  test("min of inputs: a source silent for its idle timeout stops holding the key back") {
    val input = MemoryStream[SourcedEvent](Encoders.product[SourcedEvent], spark)
    val out = KeyedWatermarks(input.toDF(), Seq("device"), "ts", "0 seconds")
      .withIdleClock("processing_time")
      .withSources(col("src"), Seq("gw1", "gw2"), Some("10 seconds"))
      .window("10 seconds").aggWithReport(count(lit(1)).as("n"))
    val q = new ManualClockQuery(out, tempDir(), 0L)
    try {
      input.addData(SourcedEvent("a", "gw1", t(100), 1.0))
      q.step()
      input.addData(SourcedEvent("a", "gw1", t(130), 1.0), SourcedEvent("a", "gw2", t(50), 1.0))
      q.step() // at 2 s: wm(a) = min(130, 50) = 50: nothing closes
      assert(windows(q.rows).isEmpty)
      input.addData(SourcedEvent("a", "gw1", t(135), 1.0))
      q.step()
      assert(windows(q.rows).isEmpty, "gw2 still holds the key back")
      val at = stepUntil(q, 20)(windows(q.rows).nonEmpty) // gw2 silent since 2 s: idle at 12 s
      assert(at == 12000L, s"got $at")
      assert(windows(q.rows) == Set(("a", 50L, 1L), ("a", 100L, 1L)))
    } finally q.stop()
  }
}
