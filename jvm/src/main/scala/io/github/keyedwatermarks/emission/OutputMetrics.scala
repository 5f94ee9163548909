package io.github.keyedwatermarks.emission

import java.nio.ByteBuffer

import org.apache.spark.sql.{Column, DataFrame}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.expressions.aggregate.TypedImperativeAggregate
import org.apache.spark.sql.catalyst.trees.TernaryLike
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{DataType, LongType, StructType}
import org.apache.spark.unsafe.types.UTF8String

import io.github.keyedwatermarks.catalyst.TallyField
import io.github.keyedwatermarks.contract.Contract

/**
 * The per-batch metrics of a keyed stage's output, `observedMetrics["keyed_watermarks_output"]`:
 *  - from the rows: `windows_emitted`, `late_rows`, `keys_with_held_watermark`;
 *  - with the per-key metrics (option `metrics`, on by default), from the keys the operator
 *    handled in the micro-batch (with rows, or by a timer), tallied per task ([[KeyTally]],
 *    passed on as one "key" row per task by [[KeyTallyRelay]]). Spark's own `numRowsTotal` of
 *    the state operator gives the rows in state; these say what happened to the keys of the batch:
 *    - `keys_in_batch`, `keys_with_data`, `keys_new` (no state before: first seen, or returning
 *      after leaving state), `keys_released` (left state), `open_windows` (of those keys, after);
 *    - `watermark_lag_{min,p50,p95,max}_s`: how far their watermarks trail Spark's global
 *      watermark (the most advanced keys' watermark), in seconds, negative for a key ahead of
 *      it; without a global watermark (max_skew="unbounded", processing-time policies) the
 *      highest watermark among those keys stands in for it;
 *    - `duplicate_rows`: rows dropped as copies of a row the key already had (option `dedup`);
 *    - `stuck_keys`: those trailing Spark's global watermark by more than `stuck_after` (null
 *      without a global watermark).
 *    With a global watermark, p50 and p95 are within 0.4% of a lag of that rank (LagHistogram);
 *    without one they are Spark's `percentile_approx` digest's (accuracy 10000). Min and max
 *    are exact.
 *
 * Every column is an [[OutputMetric]] over the same three columns, so the whole observation is
 * one pass over the rows: `catalyst.OnePassMetricsExec` plans it as that, one tally per task. Without
 * that node (a plan Spark builds on its own, `CollectMetricsExec`) the same aggregates give the
 * same row, each column on its own.
 */
private[keyedwatermarks] object OutputMetrics {
  val CountsSchema: StructType = new StructType()
    .add("windows_emitted", LongType, nullable = false)
    .add("late_rows", LongType, nullable = false)
    .add("keys_with_held_watermark", LongType, nullable = false)

  /** The observed columns of `all`'s `kind`, `late` and `tally` columns (see [[WindowEmitter]]), in order. */
  def columns(
      all: DataFrame, kind: String, late: String, tally: String, keyMetrics: Boolean, onePass: Boolean = true)
      : Seq[Column] = {
    val schema = if (keyMetrics) StructType(CountsSchema ++ KeyTally.MetricsSchema) else CountsSchema
    val children = Seq(kind, late, tally).map(c => SparkBridge.expression(all.col(c)))
    schema.fieldNames.toSeq.zipWithIndex.map { case (name, field) =>
      SparkBridge.column(OutputMetric(field, children(0), children(1), children(2), onePass)).as(name)
    }
  }
}

/** What [[OutputMetrics]] counts over some output rows: the counts and the merged key tally. */
private[keyedwatermarks] final class OutputTally {
  var windows = 0L
  var lateRows = 0L
  var heldWatermarks = 0L
  private val keys = new KeyTally

  /** One output row: its kind, late-row count (null: none) and key tally (null: not a "key" row). */
  def add(kind: UTF8String, late: Any, tally: Any): Unit = {
    if (kind == OutputTally.Window) windows += 1
    else if (kind == OutputTally.Watermark) heldWatermarks += 1
    if (late != null) lateRows += late.asInstanceOf[Long]
    if (tally != null) {
      keys.merge(KeyTally.fromBytes(tally.asInstanceOf[Array[Byte]]))
      keyMetrics = null
    }
  }

  def merge(other: OutputTally): Unit = {
    windows += other.windows
    lateRows += other.lateRows
    heldWatermarks += other.heldWatermarks
    keys.merge(other.keys)
    keyMetrics = null
  }

  // The key metrics' row (its lag quantiles read the histogram), built once for the columns that
  // read it; dropped whenever the key tally changes.
  private var keyMetrics: InternalRow = _

  /** Field `field` of `CountsSchema ++ KeyTally.MetricsSchema`. */
  def metric(field: Int): Any = field match {
    case 0 => windows
    case 1 => lateRows
    case 2 => heldWatermarks
    case f =>
      if (keyMetrics == null) keyMetrics = keys.metrics
      keyMetrics.get(f - 3, KeyTally.MetricsSchema(f - 3).dataType)
  }

  def toBytes: Array[Byte] = {
    val tally = keys.toBytes
    ByteBuffer.allocate(24 + tally.length).putLong(windows).putLong(lateRows).putLong(heldWatermarks).put(tally).array()
  }
}

private[keyedwatermarks] object OutputTally {
  private val Window = UTF8String.fromString(Contract.Kinds.Window)
  private val Watermark = UTF8String.fromString(Contract.Kinds.Watermark)

  def fromBytes(bytes: Array[Byte]): OutputTally = {
    val in = ByteBuffer.wrap(bytes)
    val t = new OutputTally
    t.windows = in.getLong()
    t.lateRows = in.getLong()
    t.heldWatermarks = in.getLong()
    t.keys.merge(KeyTally.fromBytes(java.util.Arrays.copyOfRange(bytes, 24, bytes.length)))
    t
  }
}

/** Field `field` of [[OutputMetrics]]' row, over rows' `kind`, `late` (rows) and `tally` (BINARY) columns. */
private[keyedwatermarks] final case class OutputMetric(
    field: Int, kind: Expression, late: Expression, tally: Expression, onePass: Boolean = true,
    mutableAggBufferOffset: Int = 0, inputAggBufferOffset: Int = 0)
    extends TypedImperativeAggregate[OutputTally] with TernaryLike[Expression] with TallyField {

  override def first: Expression = kind
  override def second: Expression = late
  override def third: Expression = tally

  private def fieldType = StructType(OutputMetrics.CountsSchema ++ KeyTally.MetricsSchema)(field)
  override def dataType: DataType = fieldType.dataType
  override def nullable: Boolean = fieldType.nullable
  override def prettyName: String = "kw_output_metric"

  override def createAggregationBuffer(): OutputTally = new OutputTally

  override def update(buffer: OutputTally, input: InternalRow): OutputTally = {
    buffer.add(kind.eval(input).asInstanceOf[UTF8String], late.eval(input), tally.eval(input))
    buffer
  }

  override def merge(buffer: OutputTally, other: OutputTally): OutputTally = { buffer.merge(other); buffer }
  override def eval(buffer: OutputTally): Any = buffer.metric(field)
  override def serialize(buffer: OutputTally): Array[Byte] = buffer.toBytes
  override def deserialize(bytes: Array[Byte]): OutputTally = OutputTally.fromBytes(bytes)

  override def withNewMutableAggBufferOffset(offset: Int): OutputMetric = copy(mutableAggBufferOffset = offset)
  override def withNewInputAggBufferOffset(offset: Int): OutputMetric = copy(inputAggBufferOffset = offset)
  override protected def withNewChildrenInternal(
      newFirst: Expression, newSecond: Expression, newThird: Expression): OutputMetric =
    copy(kind = newFirst, late = newSecond, tally = newThird)
}
