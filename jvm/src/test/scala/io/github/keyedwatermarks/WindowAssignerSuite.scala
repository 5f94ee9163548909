package io.github.keyedwatermarks

import org.apache.spark.sql.functions._

import io.github.keyedwatermarks.window.{SlidingWindows, TumblingWindows}

class WindowAssignerSuite extends SparkSuite {
  override protected def runsQueries: Boolean = false

  test("tumbling windows are epoch-aligned half-open intervals") {
    val w = TumblingWindows(10L)
    assert(w.lastWindowStart(0) == 0 && w.lastWindowStart(9) == 0 && w.lastWindowStart(10) == 10)
    assert(w.lastWindowStart(-1) == -10 && w.lastWindowStart(-10) == -10 && w.lastWindowStart(-11) == -20)
    assert(w.windowEnd(20) == 30)
  }

  test("window bounds equal Spark's window() for random timestamps, including negative ones") {
    val rnd = new scala.util.Random(7)
    val micros = Seq.fill(300)(rnd.nextLong() % (50L * 365 * 86400 * 1000000L)) ++ Seq(0L, -1L, 1L)
    for (size <- Seq("1 second", "7 seconds", "10 minutes", "1 day")) {
      val sizeMicros = spec.DurationOption.micros("window", size)
      val assigner = TumblingWindows(sizeMicros)
      val spark2 = spark
      import spark2.implicits._
      val sparkStarts = micros.toDF("us")
        .select($"us", window(timestamp_micros($"us"), size).getField("start").as("start"))
        .select($"us", unix_micros($"start")).as[(Long, Long)].collect().toMap
      micros.foreach { us =>
        assert(assigner.lastWindowStart(us) == sparkStarts(us), s"size=$size us=$us")
      }
    }
  }

  test("sliding windows equal Spark's window(ts, size, slide) for random timestamps") {
    val rnd = new scala.util.Random(9)
    val micros = Seq.fill(200)(rnd.nextLong() % (50L * 365 * 86400 * 1000000L)) ++ Seq(0L, -1L, 1L, 5000000L)
    for ((size, slide) <- Seq(("10 seconds", "5 seconds"), ("10 seconds", "3 seconds"), ("1 hour", "10 minutes"))) {
      val assigner = SlidingWindows(spec.DurationOption.micros("window", size),
        spec.DurationOption.micros("slide", slide))
      val spark2 = spark
      import spark2.implicits._
      val sparkStarts = micros.toDF("us")
        .select($"us", unix_micros(window(timestamp_micros($"us"), size, slide).getField("start")))
        .as[(Long, Long)].collect().groupBy(_._1).map { case (us, rs) => us -> rs.map(_._2).toSet }
      micros.foreach { us =>
        val ours = scala.collection.mutable.ArrayBuffer.empty[Long]
        assigner.foreachWindowStart(us)(ours += _)
        assert(ours.toSet == sparkStarts(us), s"size=$size slide=$slide us=$us")
        assert(ours.head == ours.max, "the last window comes first")
      }
    }
  }

  test("window size must be positive") {
    intercept[IllegalArgumentException](TumblingWindows(0L))
    intercept[IllegalArgumentException](SlidingWindows(10L, 11L))
    intercept[IllegalArgumentException](SlidingWindows(10L, 0L))
  }
}
