package io.github.keyedwatermarks

import org.apache.spark.sql.{Column, DataFrame}
import org.apache.spark.sql.functions.{col, count, lit}
import scala.jdk.CollectionConverters._

import io.github.keyedwatermarks.spec.{KeyedQuerySpec, QueryOptions}

/**
 * The two ways to build a query's spec agree: every option of the Scala builder
 * (`KeyedWatermarks(...).with...`, `.window`, `.session`, `.emit`) against the same option
 * through [[QueryOptions]] (what Python and Spark Connect send), spec for spec.
 */
class OptionSeamSuite extends SparkSuite {
  override protected def cores: Int = 1

  private lazy val events: DataFrame = spark.readStream.format("rate").load()
    .select(col("value").cast("string").as("k"), col("timestamp").as("ts"), col("value").as("v"),
      lit("1 second").as("lat"), (col("value") % 2).cast("string").as("src"), col("value").as("id"),
      lit("5 seconds").as("g"), col("timestamp").as("arr"))

  private val aggregates = Seq(count(lit(1)).as("n"))
  // One Column value each, given to both ways (as a caller would).
  private val lat = col("lat")
  private val src = col("src")
  private val arr = col("arr")
  private val gap = col("g")

  /**
   * The spec QueryOptions builds from `options` (JSON members after key, event time and
   * lateness) and the column options `columns` (as Python sends them: beside the JSON).
   */
  private def fromOptions(options: String, columns: Map[String, Column] = Map.empty,
      window: String = """"window": {"size": "10 seconds"}"""): KeyedQuerySpec = {
    val json = s"""{"key": ["k"], "event_time": "ts", "lateness": "5 seconds", $window${
        if (options.isEmpty) "" else ", " + options
      }}"""
    QueryOptions.query(json, columns.asJava, aggregates)
  }

  private def builder: KeyedWatermark = KeyedWatermarks(events, Seq("k"), "ts", "5 seconds")

  private def same(built: KeyedWatermark, options: String, columns: Map[String, Column] = Map.empty): Unit =
    assert(built.spec == fromOptions(options, columns).watermark, options)

  test("every watermark option: the builder's spec equals the options' spec") {
    same(builder, "")
    same(
      builder.withLatenessColumn(lat).withMaxSkew("10 minutes").withMaxAhead("unbounded")
        .withStuckAfter("1 minute").withMetrics("counts").withName("s1").withDedup("id"),
      """"max_skew": "10 minutes", "max_ahead": "unbounded", "stuck_after": "1 minute", "metrics": "counts",
        |"name": "s1", "dedup": ["id"]""".stripMargin, Map("key_lateness" -> lat))
    same(builder.withLatenessMapping(Map("a" -> "1 second", "b" -> "2 seconds")).withIdleClock("processing_time")
        .withSources(src, Seq("0", "1"), Some("1 minute")).withMaxAhead("2 hours"),
      """"key_lateness": {"a": "1 second", "b": "2 seconds"}, "sources": ["0", "1"], "idle_clock": "processing_time",
        |"source_idle_timeout": "1 minute", "max_ahead": "2 hours"""".stripMargin, Map("source" -> src))
    same(builder.withAdaptiveLateness(0.9, "1 second", "10 minutes", 0.05).withArrivalTime(arr)
        .withIdleTimeout("30 seconds", advance = true),
      """"adaptive_lateness": {"quantile": 0.9, "min": "1 second", "max": "10 minutes", "relative_error": 0.05},
        |"idle_timeout": "30 seconds", "advance_when_idle": true""".stripMargin, Map("arrival_time" -> arr))
    same(builder.withIdleClock("arrival").withArrivalTime(arr).withIdleTimeout("1 minute"),
      """"idle_clock": "arrival", "idle_timeout": "1 minute"""", Map("arrival_time" -> arr))
    same(builder.withAdaptiveLateness(), """"adaptive_lateness": {}""")
    same(builder.withClock("processing_time").withIdleTimeout("1 minute"),
      """"clock": "processing_time", "idle_timeout": "1 minute"""")
    same(builder.withProcessingTime(), """"clock": "processing_time"""")
    same(builder.withClock("event_time"), """"clock": "event_time"""")
    same(builder.withClosing("global"), """"closing": "global"""")
    same(builder.withGlobalClosing(), """"closing": "global"""")
    same(builder.withRealTime(), """"real_time": true""")
    same(builder.withMaxSkew("unbounded").withRealTime().withMetrics("counts"),
      """"real_time": true, "max_skew": "unbounded", "metrics": "counts"""")
    same(builder.withClosing("fleet").withMaxSkew("30 minutes"), """"closing": "fleet", "max_skew": "30 minutes"""")
    same(builder.withFleetClosing(), """"closing": "fleet"""")
    same(builder.withClosing("keyed"), """"closing": "keyed"""")
  }

  test("closing and clock are one choice each: the last one set is the one used, never two at once") {
    assert(builder.withGlobalClosing().withFleetClosing().spec == builder.withFleetClosing().spec)
    assert(builder.withFleetClosing().withGlobalClosing().spec == builder.withGlobalClosing().spec)
    def error(f: => Any): String = intercept[IllegalArgumentException](f).getMessage
    assert(error(builder.withClosing("both")) == fromOptionsError(""""closing": "both""""))
    assert(error(builder.withClock("wall")) == fromOptionsError(""""clock": "wall""""))
  }

  private def fromOptionsError(options: String): String =
    intercept[IllegalArgumentException](fromOptions(options)).getMessage

  test("windows and emission: the builder's spec equals the options' spec") {
    def sameQuery(built: KeyedWindow, window: String): Unit = {
      val expected = fromOptions("", Map("gap" -> gap).filter(_ => window.contains("{}")), window)
      assert(built.windows == expected.windows && built.emission == expected.emission, window)
    }
    sameQuery(builder.window("10 seconds"), """"window": {"size": "10 seconds"}""")
    sameQuery(builder.window("10 seconds", "5 seconds"), """"window": {"size": "10 seconds", "slide": "5 seconds"}""")
    sameQuery(builder.window("10 seconds", allowedLateness = Some("1 minute")).emit("every_batch", "retracting"),
      """"window": {"size": "10 seconds", "allowed_lateness": "1 minute", "emit": "every_batch",
        |"accumulation": "retracting"}""".stripMargin)
    sameQuery(builder.window("10 seconds").emit("every 10 seconds"),
      """"window": {"size": "10 seconds", "emit": "every 10 seconds"}""")
    sameQuery(builder.session("30 seconds", "1 minute").emit("every_batch", "discarding"),
      """"session": {"gap": "30 seconds", "allowed_lateness": "1 minute", "emit": "every_batch",
        |"accumulation": "discarding"}""".stripMargin)
    sameQuery(builder.session(gap), """"session": {}""")
  }
}
