package io.github.keyedwatermarks

import java.sql.Timestamp

import org.apache.spark.sql.Encoders
import org.apache.spark.sql.execution.WholeStageCodegenExec
import org.apache.spark.sql.execution.aggregate.HashAggregateExec
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper
import org.apache.spark.sql.functions._
import org.apache.spark.sql.kwtest.MemoryStreams

import io.github.keyedwatermarks.partials.PartialPayloadExec

/**
 * Spark's two-level hash map in the partial aggregation, per micro-batch: on while the batch
 * before had at most as many partials per task as its first level holds, off after a batch
 * with more. Own session: a first level of 1,024 groups (capacityBit 10, the least Spark
 * accepts), one core.
 */
class TwoLevelMapChoiceSuite extends SparkSuite {
  override protected def cores: Int = 1
  override protected def extraConfig: Map[String, String] =
    Map("spark.sql.codegen.aggregate.fastHashMap.capacityBit" -> "10")

  test("a batch with more partials per task than the first level holds turns it off for the next") {
    val input = MemoryStreams[Event](spark, 1)(Encoders.product[Event])
    // No skew bound: it would add trailing no-data batches, planned without new partials.
    val out =
      KeyedWatermarks(input.toDF(), Seq("device"), "ts", "5 seconds").withMaxSkew("unbounded").window("10 seconds")
        .agg(count(lit(1)).as("n"), sum("temp").as("s"))
    // Batch b: `keys` devices, two rows each in window [10 b, 10 b + 10), and each device's
    // first row of the batch closes its window of the batch before (watermark 10 b + 9 - 5).
    def batch(b: Int, keys: Int) = (0 until keys).flatMap(i =>
      Seq(1, 9).map(s => Event(s"device-$i", new Timestamp((10L * b + s) * 1000L), i.toDouble)))
    val query = out.writeStream.format("memory").queryName("two_level_map")
      .option("checkpointLocation", tempDir()).outputMode("append").start()
    def step(b: Int, keys: Int): (Long, Boolean) = {
      input.addData(batch(b, keys))
      query.processAllAvailable()
      val plan = query.asInstanceOf[StreamingQueryWrapper].streamingQuery.lastExecution.executedPlan
      val partials = plan.collect { case p: PartialPayloadExec => p }
      assert(partials.size == 1)
      val aggregates = partials.head.collect { case a: HashAggregateExec => a }
      assert(aggregates.size == 1)
      // The aggregate tops its generated stage (PartialPayloadExec above it is not generated).
      val code = plan.collect {
        case w: WholeStageCodegenExec if w.child eq aggregates.head =>
          w.doCodeGen()._2.body
      }
      assert(code.size == 1)
      (partials.head.metrics("numPartials").value, code.head.contains("FastHashMap"))
    }
    try {
      // (partials of the batch, whether its code has the first level)
      assert(step(0, 1500) == ((1500L, true))) // nothing seen yet: Spark's setting (on)
      assert(step(1, 300) == ((300L, false))) // 1,500 > 1,024 partials per task before
      assert(step(2, 300) == ((300L, true))) // 300 <= 1,024
      assert(step(3, 1200) == ((1200L, true)))
      assert(step(4, 100) == ((100L, false)))
      // A device's window is emitted, whichever map built its partials, once the device sends
      // rows in a later batch (its watermark then passes the window's end), with all its rows.
      val got = spark.table("two_level_map").select("device", "window.start", "n", "s").collect()
        .map(r => (r.getString(0), r.getTimestamp(1).getTime / 1000L, r.getLong(2), r.getDouble(3))).toSet
      val sent = Seq(1500, 300, 300, 1200, 100)
      val want = sent.indices.flatMap(b =>
        (0 until sent(b)).filter(i => sent.drop(b + 1).exists(i < _)).map(i => (s"device-$i", 10L * b, 2L, 2.0 * i)))
        .toSet
      assert(want.size == 1200 + 300 + 300 + 100) // the expectation itself, counted by hand
      assert(got == want)
    } finally query.stop()
  }
}
