package io.github.keyedwatermarks.testing

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.apache.spark.sql.{Column, DataFrame, Row, functions => F}
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.keyedwatermarks.InMemoryTws
import org.apache.spark.sql.streaming.TimeMode
import org.apache.spark.sql.types._

import io.github.keyedwatermarks.catalyst.SparkInternals.RowConverter
import io.github.keyedwatermarks.catalyst.UnsafeRowBytes
import io.github.keyedwatermarks.emission.{KeyTally, WindowEmitter}
import io.github.keyedwatermarks.operator.KeyedWindowProcessor
import io.github.keyedwatermarks.planner.KeyedPlanner
import io.github.keyedwatermarks.spec.QueryOptions

/**
 * The engine of the public test kit (`keyed_watermarks.testing` in Python): a user's keyed query
 * run micro-batch by micro-batch in memory, without a streaming query, so that a test can feed
 * rows of many keys with processing times and check what each batch emits (windows, panes, late
 * rows, watermarks, metrics). A micro-batch takes a few tens of milliseconds instead of a
 * streaming query's seconds, so a property test can run hundreds of cases.
 *
 * Each batch is planned exactly as in a query (the same planner steps over a batch DataFrame of
 * its rows: input checks, window assignment, partial aggregation) and its partials are handed to
 * one keyed processor per key, over Spark's in-memory state store and timers (`TwsTester`'s
 * handle, Spark 4.2 and later; refused with a clear message on 4.0 and 4.1). As in
 * `TransformWithStateExec`, every key's rows are handled first, then the timers due at the
 * batch's watermark (event-time policies) or processing time fire. Spark's global watermark
 * (for `max_skew` and `closing`) follows Spark's rule: the max event time of the rows with a key
 * and an event time in earlier batches, minus `lateness`, from the next batch on.
 *
 * Not covered, because they need a streaming query: restarts from a checkpoint, a `withWatermark`
 * or stateful operator upstream, and Spark's own per-batch metrics (`kw.metrics` reads them from
 * the query's progress; here the operator's per-key metrics of each batch are returned instead).
 *
 * @param events     a DataFrame with the input's schema (streaming or not: only its schema and
 *                   session are used)
 * @param options    the query's options as JSON (as `QueryOptions` reads them)
 * @param columns    the option columns by name (as `QueryOptions` reads them)
 * @param aggregates the aggregate columns, as given to `agg`
 */
final class KeyedQueryTester(
    events: DataFrame,
    options: String,
    columns: java.util.Map[String, Column],
    aggregates: java.util.List[Column]) {

  private val spark = events.sparkSession
  private val inputSchema = events.schema
  private val spec = QueryOptions.query(options, columns, aggregates.asScala.toSeq)
  private val empty = spark.createDataFrame(java.util.List.of[Row](), inputSchema)
  private val prepared = KeyedPlanner.prepare(empty, spec, streaming = false)
  private val keyCount = prepared.projected.keySchema.length
  private val timeMode = prepared.timeMode
  private val processor = new KeyedWindowProcessor(prepared.operatorPlan)
  private val operator = InMemoryTws.operator(processor, timeMode)
  private val latenessMs = spec.watermark.lateness.micros / 1000L
  private val mapper = new ObjectMapper()

  // Spark's global watermark: the max valid event time (ms) of the batches run so far.
  private var maxEventTimeMs: Option[Long] = None
  private var batches = 0L

  /**
   * Whether the query runs with processing-time, event-time or no timers: "ProcessingTime",
   * "EventTime" or "NoTime" (Spark's TimeMode names).
   */
  def timeModeName: String = timeMode.toString

  /** Spark's global watermark (ms) the next batch would run with: 0 while it has none, as in Spark. */
  def globalWatermarkMs: Long = maxEventTimeMs.map(_ - latenessMs).filter(_ > 0).getOrElse(0L)

  /**
   * Runs one micro-batch: its rows as a JSON array of arrays in the input schema's column order
   * (timestamps as microseconds since the epoch, dates as days; an empty array is a no-data batch,
   * in which only timers act) at processing time `processingTimeMs`. Returns the batch as a JSON
   * object: `rows` (the operator's output rows, those of its timers included: objects by column,
   * timestamps as microseconds, structs as objects), `metrics` (the batch's per-key metrics by
   * name, or null), `watermark` (Spark's global watermark the batch ran with, ms) and
   * `next_watermark` (the one the next batch runs with: when it is larger, Spark runs a no-data
   * batch next if no new data is waiting).
   */
  def step(rowsJson: String, processingTimeMs: Long): String = {
    val rows = rowsOf(mapper.readTree(rowsJson))
    val watermarkMs = globalWatermarkMs
    val clockWatermark = if (timeMode == TimeMode.EventTime()) Some(watermarkMs) else None
    val data = if (rows.isEmpty) Nil
    else {
      val frame = spark.createDataFrame(rows.asJava, inputSchema)
      val batch = KeyedPlanner.prepare(frame, spec, streaming = false)
      if (timeMode == TimeMode.EventTime()) batchMaxMs(rows, batch).foreach { max =>
        maxEventTimeMs = Some(math.max(maxEventTimeMs.getOrElse(Long.MinValue), max))
      }
      val byKey = batch.grouped.collect().toSeq.groupBy(r => Row.fromSeq(r.toSeq.takeRight(keyCount)))
      byKey.toSeq.sortBy(_._1.toString).flatMap { case (key, partials) =>
        operator.handleRows(key, partials.iterator, processingTimeMs, clockWatermark)
      }
    }
    val timers = timeMode match {
      case t if t == TimeMode.EventTime() => operator.fireTimers(watermarkMs, processingTimeMs, clockWatermark)
      case t if t == TimeMode.ProcessingTime() => operator.fireTimers(processingTimeMs, processingTimeMs, None)
      case _ => Nil
    }
    batches += 1
    val out = new java.util.LinkedHashMap[String, Any]()
    out.put("rows", (data ++ timers).map(r => toJson(decoded(r), outputSchema)).asJava)
    out.put("metrics", tally().orNull)
    out.put("watermark", watermarkMs)
    out.put("next_watermark", globalWatermarkMs)
    mapper.writeValueAsString(out)
  }

  // The key and event-time columns in the input rows, when they are plain columns of it.
  private val validity: Option[(Seq[Int], Int)] =
    scala.util.Try((prepared.input.keys.map(inputSchema.fieldIndex), inputSchema.fieldIndex(prepared.input.eventTime)))
      .toOption

  /**
   * The max event time (ms) of the batch's rows with a key and an event time, what Spark's global
   * watermark follows: from the rows at hand, or with a Spark job when the columns are not
   * plain input columns.
   */
  private def batchMaxMs(rows: Seq[Row], batch: KeyedPlanner.Prepared): Option[Long] = validity match {
    case Some((keys, time)) =>
      val times = rows.filter(r => !r.isNullAt(time) && keys.forall(!r.isNullAt(_)))
        .map(r => Math.floorDiv(DateTimeUtils.fromJavaTimestamp(r.getAs[java.sql.Timestamp](time)), 1000L))
      if (times.isEmpty) None else Some(times.max)
    case None =>
      val valid = batch.input.keyColumns.map(_.isNotNull).foldLeft(batch.input.eventTimeColumn.isNotNull)(_ && _)
      val max = batch.input.events.where(valid)
        .agg(F.max(F.unix_millis(batch.input.eventTimeColumn.cast(TimestampType)))).head()
      if (max.isNullAt(0)) None else Some(max.getLong(0))
  }

  /** The batch's per-key metrics (emission.KeyTally, merged per batch in a query), by name. */
  private def tally(): Option[java.util.Map[String, Any]] = Option(processor.takeTally()).map { t =>
    val metrics = t.metrics
    val m = new java.util.LinkedHashMap[String, Any]()
    KeyTally.MetricsSchema.fields.zipWithIndex.foreach { case (f, i) =>
      m.put(f.name, if (metrics.isNullAt(i)) null else metrics.get(i, f.dataType))
    }
    m
  }

  private def rowsOf(batch: JsonNode): List[Row] = {
    if (batch == null || !batch.isArray) throw new IllegalArgumentException("rows: a JSON array of rows is required")
    batch.elements().asScala.map { r =>
      if (!r.isArray || r.size() != inputSchema.length) throw new IllegalArgumentException(
        s"rows: each row needs ${inputSchema.length} values, in the order of ${inputSchema.fieldNames.mkString(", ")}; got $r")
      Row.fromSeq(inputSchema.fields.indices.map(i => fromJson(r.get(i), inputSchema(i))))
    }.toList
  }

  // The operator's rows are UnsafeRow bytes of the emitter's output schema (WindowEmitter).
  private val outputSchema = prepared.operatorPlan.emitter.outputSchema
  private val outputRows = new RowConverter(outputSchema)
  private def decoded(row: Row): Row =
    outputRows.toExternal(UnsafeRowBytes.row(row.getAs[Array[Byte]](0), outputSchema.length))

  private def fromJson(v: JsonNode, field: StructField): Any =
    if (v == null || v.isNull) null
    else field.dataType match {
      case TimestampType => DateTimeUtils.toJavaTimestamp(v.asLong())
      case TimestampNTZType => DateTimeUtils.microsToLocalDateTime(v.asLong())
      case DateType => DateTimeUtils.toJavaDate(v.asInt())
      case DoubleType => v.asDouble()
      case FloatType => v.floatValue()
      case LongType => v.asLong()
      case IntegerType => v.asInt()
      case ShortType => v.shortValue()
      case ByteType => v.asInt().toByte
      case BooleanType => v.asBoolean()
      case StringType => v.asText()
      case d: DecimalType => new java.math.BigDecimal(v.asText()).setScale(d.scale)
      case other => throw new IllegalArgumentException(
          s"rows: column ${field.name} has type ${other.simpleString}, which the test kit cannot feed yet " +
            "(timestamp, date, numbers, boolean and string columns are supported)")
    }

  private def toJson(row: Row, schema: StructType): java.util.Map[String, Any] = {
    val m = new java.util.LinkedHashMap[String, Any]()
    schema.fields.zipWithIndex.foreach { case (f, i) =>
      m.put(f.name, if (row.isNullAt(i)) null else value(f.dataType, row.get(i)))
    }
    m
  }

  private def value(t: DataType, v: Any): Any = (t, v) match {
    case (s: StructType, r: Row) => toJson(r, s)
    case (TimestampType, ts: java.sql.Timestamp) => DateTimeUtils.fromJavaTimestamp(ts)
    case (TimestampType, i: java.time.Instant) => DateTimeUtils.instantToMicros(i)
    case (TimestampNTZType, l: java.time.LocalDateTime) => DateTimeUtils.localDateTimeToMicros(l)
    case (DateType, d: java.sql.Date) => DateTimeUtils.fromJavaDate(d)
    case (_: DecimalType, d: java.math.BigDecimal) => d.toPlainString
    case (ArrayType(e, _), a: scala.collection.Seq[_]) => a.map(x => if (x == null) null else value(e, x)).asJava
    case (MapType(_, vt, _), mp: scala.collection.Map[_, _]) =>
      mp.map { case (k, x) => String.valueOf(k) -> (if (x == null) null else value(vt, x)) }.asJava
    case (_, other) => other
  }
}
