package io.github.keyedwatermarks

import java.sql.Timestamp

import org.apache.spark.sql.Encoders
import org.apache.spark.sql.execution.streaming.runtime.{MemoryStream, StreamingQueryWrapper}
import org.apache.spark.sql.functions._
import org.apache.spark.sql.kwtest.MemoryStreams

import org.apache.spark.sql.execution.aggregate.HashAggregateExec

import io.github.keyedwatermarks.partials.PartialPayloadExec

/**
 * Partials by Spark's HashAggregateExec (fixed-width payloads) when task memory runs out: the
 * hash map spills and Spark falls back to sort-based aggregation, and nothing is lost. Own
 * session: execution memory is made small (32 MiB for the whole JVM, 1 MiB pages) so that one
 * partition's partials overflow it.
 */
class HashAggregatePartialsSuite extends SparkSuite {
  override protected def cores: Int = 1
  override protected def extraConfig: Map[String, String] = Map(
    "spark.testing.reservedMemory" -> "0",
    "spark.testing.memory" -> (32L << 20).toString,
    "spark.buffer.pageSize" -> "1m")

  test("a full partial map falls back to sorting and every row still counts once, with Spark's values") {
    val input = MemoryStreams[Event](spark, 1)(Encoders.product[Event])
    // No skew bound: it would add a trailing no-data batch, whose execution has no partials.
    val out =
      KeyedWatermarks(input.toDF(), Seq("device"), "ts", "5 seconds").withMaxSkew("unbounded").window("10 seconds")
        .agg(count(lit(1)).as("n"), sum("temp").as("s"), max("temp").as("hi"))
    val keys = 150000
    // Per key: two rows in window [0, 10) and one at 30 s, which moves the key's watermark to
    // 25 s and closes [0, 10) in this batch: 300k (key, window)s in one partition. Each pass
    // goes over all keys, so the map is full long before the partition ends.
    def pass(seconds: Long, temp: Int => Double) =
      (0 until keys).map(i => Event(s"device-$i", new Timestamp(seconds * 1000L), temp(i)))
    input.addData(pass(1, _.toDouble) ++ pass(9, _ => 1.0) ++ pass(30, _ => -1.0))
    val query = out.writeStream.format("memory").queryName("hash_aggregate_spill")
      .option("checkpointLocation", tempDir()).outputMode("append").start()
    try {
      query.processAllAvailable()
      val plan = query.asInstanceOf[StreamingQueryWrapper].streamingQuery.lastExecution.executedPlan
      val partials = plan.collect { case p: PartialPayloadExec => p }
      assert(partials.size == 1 && partials.head.simpleString(10).contains("partials=hash-aggregate"))
      val aggregates = partials.head.collect { case a: HashAggregateExec => a }
      assert(aggregates.size == 1)
      assert(aggregates.head.metrics("numTasksFallBacked").value >= 1,
        "the partial map should have run out of task memory and fallen back to sorting")
      // One partial per (key, window) all the same, after the sort-based merge.
      assert(partials.head.metrics("numPartials").value == 2L * keys)
      val rows = spark.table("hash_aggregate_spill").collect()
      assert(rows.length == keys)
      val wrong = rows.filterNot { r =>
        val i = r.getString(0).stripPrefix("device-").toInt
        r.getStruct(1).getTimestamp(0).getTime == 0L && r.getLong(2) == 2L &&
        r.getDouble(3) == i + 1.0 && r.getDouble(4) == math.max(i.toDouble, 1.0)
      }
      assert(wrong.isEmpty, wrong.take(5).mkString(", "))
    } finally query.stop()
  }
}
