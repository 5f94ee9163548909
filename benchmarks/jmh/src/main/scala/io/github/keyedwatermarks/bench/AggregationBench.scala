package io.github.keyedwatermarks.bench

import java.util.concurrent.TimeUnit

import org.apache.spark.sql.{Column, DataFrame, Row, SparkSession, functions}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{GenericInternalRow, UnsafeProjection}
import org.apache.spark.sql.functions._
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.types.UTF8String
import org.openjdk.jmh.annotations._
import org.openjdk.jmh.infra.Blackhole

import io.github.keyedwatermarks.catalyst.{CatalystAggregation, SparkInternals}
import io.github.keyedwatermarks.catalyst.SparkInternals.RowConverter
import io.github.keyedwatermarks.catalyst.UnsafeRowBytes
import io.github.keyedwatermarks.emission.{Pane, WindowEmitter}

/** One local SparkSession per benchmark JVM, only to analyze `groupBy(device, window).agg(...)`. */
object BenchSpark {
  lazy val session: SparkSession = {
    val s = SparkSession.builder()
      .master("local[1]")
      .appName("keyed-watermarks-jmh")
      .config("spark.ui.enabled", "false")
      .config("spark.sql.shuffle.partitions", "1")
      .config("spark.sql.session.timeZone", "UTC")
      .getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    s
  }

  val EventSchema: StructType = StructType.fromDDL("device STRING, ts TIMESTAMP, temp DOUBLE")

  /**
   * A streaming DataFrame, as the operator gets (never started: it is only analyzed). File
   * sources make every column nullable, so the result schema's nullability (window struct,
   * count) is the one the operator sees; a batch LocalRelation would mark them non-nullable.
   */
  def events: DataFrame = session.readStream.schema(EventSchema)
    .parquet(java.nio.file.Files.createTempDirectory("kw-jmh").toString)

  /** The aggregate lists benchmarked: the run_benchmarks.py query, and a mix of every buffer kind. */
  def aggregates(name: String): Seq[Column] = name match {
    case "count_avg" => Seq(count(lit(1)).as("n"), avg("temp").as("avg_temp"))
    // declarative (count/min/max/stddev), imperative (HyperLogLog++), typed-imperative (percentile)
    case "mixed" => Seq(count(lit(1)).as("n"), min("temp").as("lo"), max("temp").as("hi"),
        stddev("temp").as("sd"), approx_count_distinct("temp").as("acd"),
        percentile_approx(col("temp"), lit(0.5), lit(1000)).as("p50"))
    case other => throw new IllegalArgumentException(s"unknown aggregate list $other")
  }
}

/**
 * Catalyst aggregation buffers (catalyst.CatalystAggregation), built exactly as the operator
 * builds them from the analyzed plan of `events.groupBy(device, window(ts, 10 s)).agg(...)`.
 * Scores are per row (update), per partial (merge) or per (key, window) (the others).
 */
@State(Scope.Thread)
@BenchmarkMode(Array(Mode.AverageTime))
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 2, time = 2, timeUnit = TimeUnit.SECONDS)
@Measurement(iterations = 3, time = 2, timeUnit = TimeUnit.SECONDS)
@Fork(1)
class AggregationBench {

  @Param(Array("count_avg", "mixed"))
  var aggs: String = _

  private var agg: CatalystAggregation = _
  private var inputs: Array[InternalRow] = _
  private var partials: Array[InternalRow] = _
  private var stored: InternalRow = _
  private var live: InternalRow = _
  private var storedExternal: Row = _
  private var buffers: RowConverter = _
  private var bytesCodec: UnsafeRowBytes.RowsCodec = _
  private var storedBytes: Array[Byte] = _
  private var group: InternalRow = _

  @Setup(Level.Trial)
  def setup(): Unit = {
    val events = BenchSpark.events
    val cols = BenchSpark.aggregates(aggs)
    val reference = events.groupBy(col("device"), window(col("ts"), "10 seconds")).agg(cols.head, cols.tail: _*)
    agg = CatalystAggregation.fromAnalyzedAggregate(
      SparkInternals.analyzedPlan(reference), SparkInternals.output(events))

    // Input rows as the scan hands them over: UnsafeRows of (device, ts, temp).
    val toUnsafe = UnsafeProjection.create(BenchSpark.EventSchema)
    val times = EventTimes.mostlyInOrder(EventTimes.Rows, seed = 2)
    val rnd = new java.util.Random(3)
    val device = UTF8String.fromString("device-000042")
    inputs = times.map { t =>
      toUnsafe(new GenericInternalRow(Array[Any](device, t, 20.0 + rnd.nextGaussian()))).copy(): InternalRow
    }
    // 64 stored partials of 16 rows each: what merge() sees from the pre-aggregation.
    partials = inputs.grouped(16).map { chunk =>
      val b = agg.newBuffer()
      chunk.foreach(r => agg.update(b, r))
      agg.toStored(b).copy()
    }.toArray
    live = agg.newBuffer()
    inputs.foreach(r => agg.update(live, r))
    val full = agg.newBuffer()
    inputs.foreach(r => agg.update(full, r))
    stored = agg.toStored(full).copy()
    buffers = new RowConverter(agg.bufferSchema)
    storedExternal = buffers.toExternal(stored)
    bytesCodec = new UnsafeRowBytes.RowsCodec(agg.bufferSchema)
    bytesCodec.add(stored)
    storedBytes = bytesCodec.result()
    group = InternalRow(device, InternalRow(EventTimes.Origin, EventTimes.Origin + EventTimes.WindowMicros))
  }

  /** update(): fold 1024 input rows into one buffer (score: ns per row). */
  @Benchmark
  @OperationsPerInvocation(1024)
  def update(): InternalRow = {
    val b = agg.newBuffer()
    var i = 0
    while (i < inputs.length) { agg.update(b, inputs(i)); i += 1 }
    b
  }

  /** merge(): fold 64 stored partials into one live buffer (score: ns per partial). */
  @Benchmark
  @OperationsPerInvocation(64)
  def merge(): InternalRow = {
    val b = agg.newBuffer()
    var i = 0
    while (i < partials.length) { agg.merge(b, partials(i)); i += 1 }
    b
  }

  /** Load a stored buffer into a live one and store it again (per (key, window) and batch). */
  @Benchmark
  def storedRoundTrip(): InternalRow = agg.toStored(agg.fromStored(stored))

  /** The same round trip through external Rows, as the operator talked to the state store before 0d3dfad. */
  @Benchmark
  def storedRoundTripViaRow(): Row =
    buffers.toExternal(agg.toStored(agg.fromStored(buffers.toInternal(storedExternal))))

  /** The same round trip through UnsafeRow bytes, as the operator keeps open windows in state now. */
  @Benchmark
  def storedRoundTripViaBytes(): Array[Byte] = {
    val row = bytesCodec.rows(storedBytes, "bench").next()
    bytesCodec.add(agg.toStored(agg.fromStored(row)))
    bytesCodec.result()
  }

  /** evaluate + result projection: the output row of one closed window. */
  @Benchmark
  def evaluate(): InternalRow = agg.result(group, live)

  @TearDown(Level.Trial)
  def tearDown(): Unit = ()
}

/** emission.WindowEmitter: one output Row per emitted window / late-row report. */
@State(Scope.Thread)
@BenchmarkMode(Array(Mode.AverageTime))
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Warmup(iterations = 2, time = 2, timeUnit = TimeUnit.SECONDS)
@Measurement(iterations = 3, time = 2, timeUnit = TimeUnit.SECONDS)
@Fork(1)
class EmissionBench {

  private var agg: CatalystAggregation = _
  private var emitter: WindowEmitter = _
  private var live: InternalRow = _
  private var group: InternalRow = _
  private var result: InternalRow = _
  private var key: InternalRow = _

  @Setup(Level.Trial)
  def setup(): Unit = {
    val events = BenchSpark.events
    val cols = BenchSpark.aggregates("count_avg")
    val reference = events.groupBy(col("device"), functions.window(col("ts"), "10 seconds"))
      .agg(cols.head, cols.tail: _*)
    agg = CatalystAggregation.fromAnalyzedAggregate(
      SparkInternals.analyzedPlan(reference), SparkInternals.output(events))
    emitter =
      new WindowEmitter(reference.schema, Array(reference.schema.fieldIndex("device")), None, withRevision = false)
    val toUnsafe = UnsafeProjection.create(BenchSpark.EventSchema)
    val device = UTF8String.fromString("device-000042")
    live = agg.newBuffer()
    EventTimes.mostlyInOrder(100, seed = 4).foreach { t =>
      agg.update(live, toUnsafe(new GenericInternalRow(Array[Any](device, t, 21.5))))
    }
    key = InternalRow(device)
    group = InternalRow(device, InternalRow(EventTimes.Origin, EventTimes.Origin + EventTimes.WindowMicros))
    result = agg.result(group, live).copy()
  }

  /** WindowEmitter.window on a ready result row (report columns + conversion to Row). */
  @Benchmark
  def window(): Row = emitter.window(result, Pane.OnTime, 0, retraction = false, EventTimes.Origin)

  /** Evaluate the buffer and emit: the whole per-window output path. */
  @Benchmark
  def evaluateAndEmit(): Row =
    emitter.window(agg.result(group, live), Pane.OnTime, 0, retraction = false, EventTimes.Origin)

  /** WindowEmitter.lateRows: the per-key, per-batch late-row report row. */
  @Benchmark
  def lateRows(bh: Blackhole): Unit = bh.consume(emitter.lateRows(key, 3L, EventTimes.Origin))
}
