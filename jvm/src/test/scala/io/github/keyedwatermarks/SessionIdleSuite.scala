package io.github.keyedwatermarks

import java.sql.Timestamp

import org.apache.spark.sql.{Encoders, Row}
import org.apache.spark.sql.execution.streaming.runtime.MemoryStream
import org.apache.spark.sql.functions._
import org.apache.spark.sql.kwtest.ManualClockQuery

/** idle_timeout with sessions and allowed lateness (controllable processing-time clock). */
class SessionIdleSuite extends SparkSuite {

  private def ev(seconds: Long, temp: Double) = Event("a", new Timestamp(seconds * 1000L), temp)

  /** (start s, end s, n, sum, revision) of the emitted sessions. */
  private def sessions(rows: Seq[Row]): Seq[(Long, Long, Long, Double, Int)] =
    rows.filter(_.getAs[String]("kw_kind") == "window").map { r =>
      val w = r.getStruct(1)
      (w.getTimestamp(0).getTime / 1000, w.getTimestamp(1).getTime / 1000, r.getLong(2), r.getDouble(3),
        r.getAs[Int]("revision"))
    }.sortBy(s => (s._5, s._1))

  test("an idle key emits a fired session that changed since (its next revision), not only unfired ones") {
    val input = MemoryStream[Event](Encoders.product[Event], spark)
    val aggs = Seq(count(lit(1)).as("n"), sum("temp").as("s"))
    val out = KeyedWatermarks(input.toDF(), Seq("device"), "ts", "0 seconds")
      .withIdleClock("processing_time")
      .withIdleTimeout("10 seconds")
      .session("10 seconds", "20 seconds")
      .aggWithReport(aggs: _*)
    val q = new ManualClockQuery(out, tempDir(), 0L)
    try {
      // wm 30: [15,25) fires revision 0; [30,40) stays open.
      input.addData(ev(15, 1.0), ev(30, 2.0))
      q.step()
      assert(sessions(q.rows) == Seq((15L, 25L, 1L, 1.0, 0)))
      // a@24 is on time (24 > 30 - 20) and bridges both: [15,40), revision 1 pending, not due (40 > 30).
      input.addData(ev(24, 4.0))
      q.step()
      assert(sessions(q.rows).size == 1)
      var steps = 0
      // Half the idle timeout per batch: the key's timer is due within a few batches (each costs
      // a micro-batch on every Spark line this suite runs on), not ten.
      while (sessions(q.rows).size < 2 && steps < 8) { q.step(5000L); steps += 1 }
      assert(sessions(q.rows) == Seq((15L, 25L, 1L, 1.0, 0), (15L, 40L, 3L, 7.0, 1)))
      // The last revision is Spark's session over all (on-time) rows.
      val spark2 = spark
      import spark2.implicits._
      val expected = Seq(ev(15, 1.0), ev(30, 2.0), ev(24, 4.0)).toDF()
        .groupBy($"device", session_window($"ts", "10 seconds")).agg(aggs.head, aggs.tail: _*).collect()
        .map(r =>
          (r.getStruct(1).getTimestamp(0).getTime / 1000, r.getStruct(1).getTimestamp(1).getTime / 1000,
            r.getLong(2), r.getDouble(3))).toSeq
      val lastRevision = sessions(q.rows).maxBy(_._5)
      assert(expected == Seq((lastRevision._1, lastRevision._2, lastRevision._3, lastRevision._4)))
    } finally q.stop()
  }
}
