package io.github.keyedwatermarks.emission

import org.apache.spark.sql.{Column, DataFrame}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.expressions.aggregate.TypedImperativeAggregate
import org.apache.spark.sql.catalyst.trees.UnaryLike
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.DataType

/**
 * The per-batch key metrics in `observedMetrics["keyed_watermarks_output"]`, from the keys
 * the operator handled in the micro-batch (with rows, or by a timer), tallied per task
 * ([[KeyTally]]). Spark's own `numRowsTotal` of the state operator gives the rows in state;
 * these say what happened to the keys of the batch:
 *  - `keys_in_batch`, `keys_with_data`, `keys_new` (no state before: first seen, or returning
 *    after leaving state), `keys_released` (left state), `open_windows` (of those keys, after);
 *  - `watermark_lag_{min,p50,p95,max}_s`: how far their watermarks trail Spark's global
 *    watermark (the most advanced keys' watermark), in seconds, negative for a key ahead of it;
 *    without a global watermark (max_skew="unbounded", processing-time policies) the highest
 *    watermark among those keys stands in for it;
 *  - `duplicate_rows`: rows dropped as copies of a row the key already had (option `dedup`);
 *  - `stuck_keys`: those trailing Spark's global watermark by more than `stuck_after` (null
 *    without a global watermark).
 * With a global watermark, p50 and p95 are within 0.4% of a lag of that rank (LagHistogram);
 * without one they are Spark's `percentile_approx` digest's (accuracy 10000). Min and max are
 * exact.
 */
private[keyedwatermarks] object KeyMetrics {

  /** The metrics' columns for `observe()`, over the tally rows of `all` (column `tally`, null elsewhere). */
  def columns(all: DataFrame, tally: String): Seq[Column] =
    // observe() builds each aggregate of each column anew (it shares none between columns), so
    // every column merges the tallies itself: a few rows per micro-batch, one per task.
    KeyTally.MetricsSchema.fieldNames.toSeq.map { name =>
      KeyTallyMerge.of(all.col(tally)).getField(name).as(name)
    }
}

/** The per-batch metrics ([[KeyTally.MetricsSchema]]) of the tallies (BINARY, nulls skipped) of a micro-batch's tasks. */
private[keyedwatermarks] final case class KeyTallyMerge(
    child: Expression, mutableAggBufferOffset: Int = 0, inputAggBufferOffset: Int = 0)
    extends TypedImperativeAggregate[KeyTally] with UnaryLike[Expression] {

  override def dataType: DataType = KeyTally.MetricsSchema
  override def nullable: Boolean = false
  override def prettyName: String = "kw_key_tally"

  override def createAggregationBuffer(): KeyTally = new KeyTally

  override def update(buffer: KeyTally, input: InternalRow): KeyTally = {
    val v = child.eval(input)
    if (v != null) buffer.merge(KeyTally.fromBytes(v.asInstanceOf[Array[Byte]]))
    buffer
  }

  override def merge(buffer: KeyTally, other: KeyTally): KeyTally = { buffer.merge(other); buffer }
  override def eval(buffer: KeyTally): Any = buffer.metrics
  override def serialize(buffer: KeyTally): Array[Byte] = buffer.toBytes
  override def deserialize(bytes: Array[Byte]): KeyTally = KeyTally.fromBytes(bytes)

  override def withNewMutableAggBufferOffset(offset: Int): KeyTallyMerge = copy(mutableAggBufferOffset = offset)
  override def withNewInputAggBufferOffset(offset: Int): KeyTallyMerge = copy(inputAggBufferOffset = offset)
  override protected def withNewChildInternal(newChild: Expression): KeyTallyMerge = copy(child = newChild)
}

private[keyedwatermarks] object KeyTallyMerge {
  /** The merged metrics of a BINARY column of tallies, as a Column. */
  def of(tallies: Column): Column = SparkBridge.column(KeyTallyMerge(SparkBridge.expression(tallies)))
}
