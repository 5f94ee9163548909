package io.github.keyedwatermarks

import java.sql.Timestamp

import org.apache.spark.sql.{Encoders, Row}
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
import org.apache.spark.sql.functions._
import org.apache.spark.sql.kwtest.{ManualClockQuery, MemoryStreams}

case class Event(device: String, ts: Timestamp, temp: Double)

/** End-to-end through Spark: per-batch emission, late rows, idle keys (controllable clock). */
class KeyedWindowOperatorSuite extends SparkSuite {

  private def t(seconds: Long) = new Timestamp(seconds * 1000L)
  private def ev(device: String, seconds: Long, temp: Double = 1.0) = Event(device, t(seconds), temp)

  /** (device, window start seconds, n, sum) of the window rows; (device, late) of late rows. */
  private def windows(
      rows: Seq[Row]): Set[(String, Long, Long, Double)] = rows.filter(_.getAs[String]("kw_kind") == "window")
    .map(r => (r.getString(0), r.getStruct(1).getTimestamp(0).getTime / 1000, r.getLong(2), r.getDouble(3))).toSet
  private def late(rows: Seq[Row]): Map[String, Long] = rows.filter(_.getAs[String]("kw_kind") == "late")
    .groupBy(_.getString(0)).map { case (k, rs) => k -> rs.map(_.getAs[Long]("kw_late_rows")).sum }

  private def start(idle: Option[String]) = {
    val input = MemoryStream[Event](Encoders.product[Event], spark)
    val keyed = KeyedWatermarks(input.toDF(), Seq("device"), "ts", "5 seconds")
    // The wall clock by name (the ManualClock drives processing time).
    val out = idle.fold(keyed)(t => keyed.withIdleClock("processing_time").withIdleTimeout(t))
      .window("10 seconds")
      .aggWithReport(count(lit(1)).as("n"), sum("temp").as("s"))
    (input, new ManualClockQuery(out, tempDir(), 0L))
  }

  test("each key's windows close in the batch its own watermark passes them") {
    val (input, q) = start(None)
    try {
      input.addData(ev("fast", 1), ev("fast", 3), ev("slow", 2))
      q.step()
      assert(windows(q.rows).isEmpty)
      input.addData(ev("fast", 16)) // wm(fast) = 11 >= 10: fast's [0,10) closes now
      q.step()
      assert(windows(q.rows) == Set(("fast", 0L, 2L, 2.0)))
      input.addData(ev("fast", 40), ev("slow", 4)) // slow's row is on time: wm(slow) = -3
      q.step()
      assert(windows(q.rows) == Set(("fast", 0L, 2L, 2.0), ("fast", 10L, 1L, 1.0)))
      input.addData(ev("slow", 15), ev("slow", 9)) // 9 is on time: checked against wm(slow) at batch start
      q.step()
      assert(windows(q.newRows) == Set(("slow", 0L, 3L, 3.0)), "slow's [0,10) closes in this batch, alone")
      input.addData(ev("slow", 1), ev("fast", 2)) // both late now
      q.step()
      assert(late(q.rows) == Map("slow" -> 1L, "fast" -> 1L))
      assert(windows(q.rows).size == 3, "late rows never reopen a window")
    } finally q.stop()
  }

  test("idle_timeout emits a silent key's windows once: its rows for them are late, until it is forgotten") {
    val (input, q) = start(Some("10 seconds"))
    try {
      input.addData(ev("a", 1, 2.0), ev("a", 2, 3.0))
      q.step()
      val openedAt = q.clock.getTimeMillis()
      var steps = 0
      while (windows(q.rows).isEmpty && steps < 20) { q.step(); steps += 1 }
      assert(windows(q.rows) == Set(("a", 0L, 2L, 5.0)))
      val emittedAfter = q.clock.getTimeMillis() - openedAt
      assert(emittedAfter >= 10000L && emittedAfter <= 12000L, s"emitted after $emittedAfter ms")
      // Idle, not yet forgotten: a row for the emitted window is late (counted), and the
      // window is not emitted a second time, however long we wait.
      input.addData(ev("a", 3, 7.0))
      q.step()
      assert(late(q.rows) == Map("a" -> 1L))
      val lastArrival = q.clock.getTimeMillis()
      while (keysInState(q) == Seq("a") && steps < 60) { q.step(); steps += 1 }
      assert(windows(q.rows) == Set(("a", 0L, 2L, 5.0)))
      // Forgotten: idle for twice the timeout, the key left state. A row now starts over
      // (documented: the one case where a window can be emitted again).
      val forgottenAfter = q.clock.getTimeMillis() - lastArrival
      assert(keysInState(q).isEmpty && forgottenAfter >= 20000L && forgottenAfter <= 22000L, s"$forgottenAfter ms")
      input.addData(ev("a", 4, 9.0))
      q.step()
      while (windows(q.rows).size < 2 && steps < 90) { q.step(); steps += 1 }
      assert(q.rows.count(_.getAs[String]("kw_kind") == "window") == 2)
      assert(windows(q.rows) == Set(("a", 0L, 2L, 5.0), ("a", 0L, 1L, 9.0)))
    } finally q.stop()
  }

  /** The keys in the query's state after its last committed batch (Spark's state data source). */
  private def keysInState(q: ManualClockQuery): Seq[String] =
    spark.read.format("statestore").option("path", q.checkpoint).option("stateVarName", "key_state").load()
      .select("key.kw_key_0").collect().map(_.getString(0)).toSeq.sorted

  test("partials of one (key, window) from several input partitions merge to Spark's values") {
    val input = MemoryStreams[Event](spark, 3)(Encoders.product[Event])
    val aggs = Seq(count(lit(1)).as("n"), sum("temp").as("s"), max("temp").as("hi"),
      sort_array(collect_list("temp")).as("l"), percentile_approx(col("temp"), lit(0.5), lit(10000)).as("p50"))
    val out = KeyedWatermarks(input.toDF(), Seq("device"), "ts", "2 seconds").window("10 seconds")
      .aggWithReport(aggs: _*)
    val q = new ManualClockQuery(out, tempDir(), 0L)
    try {
      val first = (0 until 60).map(i => ev(s"d${i % 2}", i % 20, i.toDouble))
      input.addData(first)
      q.step()
      val second = (0 until 30).map(i => ev(s"d${i % 2}", 20 + i % 15, 100.0 + i)) ++
        Seq(ev("d0", 3, -1.0), ev("d1", 19, -2.0)) // d0's row is late (wm 17 >= 10); d1's is not
      input.addData(second)
      q.step()
      val spark2 = spark
      import spark2.implicits._
      val onTime = (first ++ second).filterNot(e => e.device == "d0" && e.temp == -1.0).toDF()
      val closed = windows(q.rows).map(w => (w._1, w._2))
      val expected = onTime.groupBy($"device", window($"ts", "10 seconds")).agg(aggs.head, aggs.tail: _*)
        .collect().filter(r => closed.contains((r.getString(0), r.getStruct(1).getTimestamp(0).getTime / 1000)))
        .map(r => (r.getString(0), r.getStruct(1).getTimestamp(0).getTime / 1000) -> r.toSeq.drop(2)).toMap
      val actual = q.rows.filter(_.getAs[String]("kw_kind") == "window")
        .map(r => (r.getString(0), r.getStruct(1).getTimestamp(0).getTime / 1000) -> r.toSeq.slice(2, 7)).toMap
      assert(closed.size == 6, s"windows [0,10), [10,20), [20,30) of both keys close (wm = 34 - 2): $closed")
      assert(actual == expected)
      assert(late(q.rows) == Map("d0" -> 1L))
    } finally q.stop()
  }

  test("without idle_timeout no timers run: processAllAvailable returns") {
    val input = MemoryStream[Event](Encoders.product[Event], spark)
    val out = KeyedWatermarks(input.toDF(), Seq("device"), "ts", "0 seconds").window("10 seconds")
      .agg(count(lit(1)).as("n"))
    val q = out.writeStream.format("memory").queryName("no_timers").outputMode("append")
      .option("checkpointLocation", tempDir()).start()
    try {
      input.addData(ev("a", 1), ev("a", 12))
      q.processAllAvailable()
      assert(spark.table("no_timers").collect().map(_.getLong(2)).toSeq == Seq(1L))
      assert(spark.table("no_timers").columns.toSeq == Seq("device", "window", "n"))
    } finally q.stop()
  }

  test("one key's windows keep separate buffers in its state row (typed imperative and string buffers)") {
    val input = MemoryStream[Event](Encoders.product[Event], spark)
    val out = KeyedWatermarks(input.toDF(), Seq("device"), "ts", "30 seconds").window("10 seconds")
      .aggWithReport(sort_array(collect_list("temp")).as("l"), max(format_string("%.0f", col("temp"))).as("m"))
    val q = new ManualClockQuery(out, tempDir(), 0L)
    try {
      input.addData(ev("a", 1, 1.0), ev("a", 11, 11.0), ev("a", 21, 21.0))
      q.step()
      input.addData(ev("a", 2, 2.0), ev("a", 12, 12.0), ev("a", 22, 22.0))
      q.step()
      input.addData(ev("a", 100, 100.0))
      q.step()
      val got = q.rows.filter(_.getAs[String]("kw_kind") == "window")
        .map(r => (r.getStruct(1).getTimestamp(0).getTime / 1000, r.getSeq[Double](2), r.getString(3))).toSet
      assert(got == Set((0L, Seq(1.0, 2.0), "2"), (10L, Seq(11.0, 12.0), "12"), (20L, Seq(21.0, 22.0), "22")))
    } finally q.stop()
  }
}
