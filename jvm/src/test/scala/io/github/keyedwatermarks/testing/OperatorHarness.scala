package io.github.keyedwatermarks.testing

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{Column, DataFrame, Row, SparkSession}
import org.apache.spark.sql.streaming.{OutputMode, TwsTester}
import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.apache.spark.sql.catalyst.util.DateTimeUtils
import org.apache.spark.sql.types._

import io.github.keyedwatermarks.catalyst.SparkInternals.RowConverter
import io.github.keyedwatermarks.catalyst.UnsafeRowBytes
import io.github.keyedwatermarks.operator.KeyedWindowProcessor
import io.github.keyedwatermarks.planner.KeyedPlanner
import io.github.keyedwatermarks.spec.QueryOptions

/**
 * Drives the operator in memory, micro-batch by micro-batch, with Spark's `TwsTester` (an
 * in-memory state store and timers) instead of a streaming query: the partials of each batch
 * are planned exactly as in a query (a batch DataFrame through the same planner steps) and
 * handed to one [[KeyedWindowProcessor]] per key, as `transformWithState` would. A case takes
 * a fraction of a second instead of a streaming query's 5-10 s, so the property tests
 * (tests/test_operator_in_memory.py) can run hundreds of generated cases against the reference
 * model. Reached from Python through py4j (options as in `QueryOptions`).
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
  private val tester = new TwsTester[Row, Row, Row](
    new KeyedWindowProcessor(prepared.operatorPlan), Nil, prepared.timeMode, OutputMode.Append(), None)

  private val inputSchema = StructType.fromDDL(schema)
  private val mapper = new ObjectMapper()

  /**
   * One micro-batch: its rows as a JSON array of arrays in the schema's column order
   * (timestamps as microseconds since the epoch), the operator's output rows out as a JSON
   * array of objects (timestamps as microseconds, structs as objects). JSON both ways keeps a
   * case free of Spark jobs other than the batch's partial aggregation.
   */
  def batch(rowsJson: String): String = {
    val rows = mapper.readTree(rowsJson).elements().asScala.map { r =>
      Row.fromSeq(inputSchema.fields.indices.map(i => fromJson(r.get(i), inputSchema(i).dataType)))
    }.toList
    val frame = spark.createDataFrame(rows.asJava, inputSchema)
    val grouped = KeyedPlanner.prepare(frame, spec, streaming = false).grouped.collect()
    val byKey = grouped.groupBy(r => Row.fromSeq(r.toSeq.takeRight(keyCount)))
    val out = byKey.toSeq.sortBy(_._1.toString).flatMap { case (key, partials) => tester.test(key, partials.toList) }
    mapper.writeValueAsString(out.map(r => toJson(decoded(r), outputSchema)).asJava)
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
