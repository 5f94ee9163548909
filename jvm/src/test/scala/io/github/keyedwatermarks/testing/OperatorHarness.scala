package io.github.keyedwatermarks.testing

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{Column, Row, SparkSession}
import org.apache.spark.sql.streaming.{OutputMode, TimeMode}
import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.statefulprocessor.ImplicitGroupingKeyTracker
import org.apache.spark.sql.execution.streaming.operators.stateful.transformwithstate.timers.{
  ExpiredTimerInfoImpl, TimerValuesImpl
}
import org.apache.spark.sql.kwtest.InMemoryHandles
import org.apache.spark.sql.types._

import io.github.keyedwatermarks.catalyst.SparkInternals.RowConverter
import io.github.keyedwatermarks.catalyst.UnsafeRowBytes
import io.github.keyedwatermarks.emission.{KeyTally, WindowEmitter}
import io.github.keyedwatermarks.operator.KeyedWindowProcessor
import io.github.keyedwatermarks.planner.KeyedPlanner
import io.github.keyedwatermarks.spec.QueryOptions

/**
 * Drives the operator in memory, micro-batch by micro-batch, over the in-memory state store and
 * timers of Spark's `TwsTester` (its `InMemoryStatefulProcessorHandle`) instead of a streaming
 * query: the partials of each batch are planned exactly as in a query (a batch DataFrame
 * through the same planner steps) and handed to one [[KeyedWindowProcessor]] per key, as
 * `transformWithState` would. A case takes a fraction of a second instead of a streaming
 * query's 5-10 s, so the property tests (tests/test_operator_in_memory.py) can run hundreds of
 * generated cases against the reference models. Reached from Python through py4j (options as
 * in `QueryOptions`).
 *
 * Each batch comes with its clocks, as Spark gives them to `transformWithState`: Spark's global
 * watermark (event-time policies: max_skew, closing='global') and the batch's processing time.
 * As in `TransformWithStateExec`, every key's rows are handled first, then the timers due at
 * that watermark or processing time fire. (TwsTester's own `setWatermark` / `setProcessingTime`
 * fire the due timers when the clock is set, before the batch's rows: a key whose timer and rows
 * fall in one batch would then be handled in the other order than in a query.)
 */
final class OperatorHarness(
    spark: SparkSession,
    schema: String,
    options: String,
    columns: java.util.Map[String, Column],
    aggregates: java.util.List[Column]) {

  private val spec = QueryOptions.query(options, columns, aggregates.asScala.toSeq)
  private val prepared = KeyedPlanner.prepare(spark.createDataFrame(java.util.List.of[Row](),
      StructType.fromDDL(schema)), spec, streaming = false)
  private val keyCount = prepared.projected.keySchema.length
  private val timeMode = prepared.timeMode
  private val processor = new KeyedWindowProcessor(prepared.operatorPlan)
  private val handle = InMemoryHandles(timeMode)
  processor.setHandle(handle)
  processor.init(OutputMode.Append(), timeMode)

  private val inputSchema = StructType.fromDDL(schema)
  private val mapper = new ObjectMapper()

  /** Whether the query would run with processing-time or event-time timers. */
  def timeModeName: String = timeMode.toString

  /**
   * Runs micro-batches: their rows as a JSON array (one per batch) of arrays of rows in the
   * schema's column order (timestamps as microseconds since the epoch), and each batch's clocks
   * as a JSON array of [Spark's global watermark (ms; 0 while it has none, as in Spark), the
   * processing time (ms)]; batches beyond the rows are no-data batches (timers only). Returns
   * the operator's output rows per batch, those of its timers included, as a JSON array of
   * arrays of objects (timestamps as microseconds, structs as objects). JSON both ways keeps a
   * case free of Spark jobs other than each batch's partial aggregation.
   */
  def run(batchesJson: String, clocksJson: String): String = {
    val batches = mapper.readTree(batchesJson).elements().asScala.map(rowsOf).toVector
    val clocks = mapper.readTree(clocksJson).elements().asScala.map(c => (c.get(0).asLong(), c.get(1).asLong()))
      .toVector
    val partials = partialsByBatch(batches)
    val out = clocks.zipWithIndex.map { case ((watermarkMs, processingTimeMs), n) =>
      val rows = batch(partials.getOrElse(n, Map.empty), watermarkMs, processingTimeMs)
        .map(r => toJson(decoded(r), outputSchema))
      (rows ++ tallyRow()).asJava
    }
    mapper.writeValueAsString(out.asJava)
  }

  /**
   * The batch's per-key metrics (emission.KeyTally: in a query, one row per task that the
   * per-batch metrics merge), as one "key" row: `kw_key_metrics` holds the metrics by name.
   */
  private def tallyRow(): Option[java.util.Map[String, Any]] = Option(processor.takeTally()).map { t =>
    val metrics = t.metrics
    val m = new java.util.LinkedHashMap[String, Any]()
    KeyTally.MetricsSchema.fields.zipWithIndex.foreach { case (f, i) => m.put(f.name, metrics.get(i, f.dataType)) }
    val row = new java.util.LinkedHashMap[String, Any]()
    row.put(WindowEmitter.KindColumn, WindowEmitter.KeyKindValue)
    row.put(WindowEmitter.KeyMetricsColumn, m)
    row
  }

  private def rowsOf(batch: JsonNode): List[Row] = batch.elements().asScala.map { r =>
    Row.fromSeq(inputSchema.fields.indices.map(i => fromJson(r.get(i), inputSchema(i).dataType)))
  }.toList

  /**
   * Each batch's partials by key (payload first, then the key columns, as the operator gets
   * them), each batch planned and aggregated on its own, as a query does each micro-batch.
   */
  private def partialsByBatch(batches: Seq[List[Row]]): Map[Int, Map[Row, Seq[Row]]] =
    batches.zipWithIndex.filter(_._1.nonEmpty).map { case (rows, n) =>
      val frame = spark.createDataFrame(rows.asJava, inputSchema)
      val partials = KeyedPlanner.prepare(frame, spec, streaming = false).grouped.collect().toSeq
      n -> partials.groupBy(r => Row.fromSeq(r.toSeq.takeRight(keyCount)))
    }.toMap

  /**
   * One micro-batch, as `TransformWithStateExec` runs it: every key's partials with the batch's
   * clocks, then the timers due at its watermark (event time) or processing time.
   */
  private def batch(byKey: Map[Row, Seq[Row]], watermarkMs: Long, processingTimeMs: Long): Seq[Row] = {
    val clocks = new TimerValuesImpl(Some(processingTimeMs),
      if (timeMode == TimeMode.EventTime()) Some(watermarkMs) else None)
    val data = byKey.toSeq.sortBy(_._1.toString).flatMap { case (key, partials) =>
      ImplicitGroupingKeyTracker.setImplicitKey(key)
      try processor.handleInputRows(key, partials.iterator, clocks).toList
      finally ImplicitGroupingKeyTracker.removeImplicitKey()
    }
    data ++ expiredTimers(clocks, if (timeMode == TimeMode.EventTime()) watermarkMs else processingTimeMs)
  }

  /** The timers due at `threshold` (ms), each handled and then deleted, as Spark does. */
  private def expiredTimers(clocks: TimerValuesImpl, threshold: Long): Seq[Row] =
    if (timeMode == TimeMode.None()) Nil
    else handle.timers.listExpiredTimers[Row](threshold).flatMap { case (expiry, key) =>
      ImplicitGroupingKeyTracker.setImplicitKey(key)
      try {
        val out = processor.handleExpiredTimer(key, clocks, new ExpiredTimerInfoImpl(Some(expiry))).toList
        handle.deleteTimer(expiry)
        out
      } finally ImplicitGroupingKeyTracker.removeImplicitKey()
    }

  // The operator's rows are UnsafeRow bytes of the emitter's output schema (WindowEmitter).
  private val outputSchema = prepared.operatorPlan.emitter.outputSchema
  private val outputRows = new RowConverter(outputSchema)
  private def decoded(row: Row): Row =
    outputRows.toExternal(UnsafeRowBytes.row(row.getAs[Array[Byte]](0), outputSchema.length))

  private def fromJson(v: JsonNode, t: DataType): Any =
    if (v == null || v.isNull) null
    else t match {
      case TimestampType => DateTimeUtils.toJavaTimestamp(v.asLong())
      case DoubleType => v.asDouble()
      case LongType => v.asLong()
      case IntegerType => v.asInt()
      case StringType => v.asText()
      case other => throw new IllegalArgumentException(s"OperatorHarness: no JSON input for $other")
    }

  private def toJson(row: Row, schema: StructType): java.util.Map[String, Any] = {
    val m = new java.util.LinkedHashMap[String, Any]()
    schema.fields.zipWithIndex.foreach { case (f, i) =>
      val v = if (row.isNullAt(i)) null
      else (f.dataType, row.get(i)) match {
        case (s: StructType, r: Row) => toJson(r, s)
        case (TimestampType, ts: java.sql.Timestamp) => DateTimeUtils.fromJavaTimestamp(ts)
        case (ArrayType(_, _), a: scala.collection.Seq[_]) => a.asJava
        case (_, other) => other
      }
      m.put(f.name, v)
    }
    m
  }

}
