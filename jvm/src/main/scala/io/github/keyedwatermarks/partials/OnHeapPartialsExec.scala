package io.github.keyedwatermarks.partials

import org.apache.spark.TaskContext
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.execution.SparkPlan
import org.apache.spark.sql.types.{ArrayType, DataType, LongType, StringType, StructType}

import io.github.keyedwatermarks.catalyst.{CatalystAggregation, UnsafeRowBytes}
import io.github.keyedwatermarks.input.{InvalidRows, ProjectedInput}
import io.github.keyedwatermarks.window.WindowAssigner

/**
 * The partial aggregation held on the JVM heap ([[OnHeapPartials]]), for payloads Spark's
 * HashAggregateExec cannot hold (see [[KeyedPartialAggregate.sparkHashAggregate]]).
 */
private[keyedwatermarks] case class KeyedPartialAggregateExec(
    keys: Seq[Attribute],
    eventTime: Attribute,
    keptRow: Option[Attribute],
    policy: PolicyColumns,
    windows: WindowAssigner,
    aggregation: CatalystAggregation,
    inputs: Seq[Attribute],
    payload: StructType,
    output: Seq[Attribute],
    child: SparkPlan)
    extends KeyedPartialNode {

  override protected def withNewChildInternal(newChild: SparkPlan): KeyedPartialAggregateExec = copy(child = newChild)
  override protected def path: String = "on-heap"

  override protected def doExecute(): RDD[InternalRow] = {
    val agg = aggregation
    val assigner = windows
    val childOutput = child.output
    val in = inputs
    val keyAttrs = keys
    val ts = eventTime
    val outAttrs = output
    val payloadSchema = payload
    val kept = keptRow
    val policyCols = policy
    val numPartials = longMetric("numPartials")
    child.execute().mapPartitions { rows =>
      val reorder: InternalRow => InternalRow =
        if (childOutput.map(_.exprId) == in.map(_.exprId)) identity else UnsafeProjection.create(in, childOutput)
      val columns = PartialInputs.bind(in, keyAttrs, ts, kept, policyCols, stringKeys = true)
      val invalid = new InvalidRowCounter(in.indexWhere(_.name == ProjectedInput.InvalidReasonCode))
      val out = new PartialOutput(payloadSchema, outAttrs, keyAttrs, agg, policyCols, kept.map(_.dataType))
      val partials = new OnHeapPartials(agg, assigner, columns, invalid, out)
      (partials.aggregate(rows.map(reorder)) ++ invalid.sentinels(agg, keyAttrs, policyCols, in, out))
        .map { row => numPartials += 1; row }
    }
  }
}

/**
 * Where a partition's input columns are (ordinals into the input row; -1 when absent), and
 * the grouping key of a partial, bound to `JoinedRow(input row, window start)`.
 */
private[partials] final case class PartialInputs(
    keyCount: Int,
    eventTime: Int,
    lateness: Int,
    sessionEnd: Int,
    /** The row's arrival time in micros, never null (Long.MinValue: none); -1 when absent. */
    arrival: Int,
    eventTimes: Boolean,
    kept: Int,
    keptWidth: Int,
    stringKey: Int,
    groupKey: Seq[Expression],
    /** With dedup: (keys..., dedup values), a row's identity within the partition; else empty. */
    dedupKey: Seq[Expression] = Nil,
    partition: Long = 0L) {

  /** A projection to the grouping key; its result is reused by the next call. */
  def groupKeyProjection(): GroupKeyProjection = new GroupKeyProjection(groupKey)
}

private[partials] object PartialInputs {

  /**
   * The partial aggregation's columns bound to its input columns `in`, once per task (nothing
   * here runs per row), in the task's partition. `stringKeys`: a single STRING key without
   * source or dedup is looked up by its value (see [[OnHeapPartials]]); else by the grouping key.
   */
  def bind(
      in: Seq[Attribute],
      keys: Seq[Attribute],
      eventTime: Attribute,
      keptRow: Option[Attribute],
      policy: PolicyColumns,
      stringKeys: Boolean): PartialInputs = {
    def ordinal(a: Option[Attribute]): Int = a.map(x => in.indexWhere(_.exprId == x.exprId)).getOrElse(-1)
    def bound(a: Attribute): Expression = BindReferences.bindReference[Expression](a, in)
    PartialInputs(
      keyCount = keys.size,
      eventTime = ordinal(Some(eventTime)),
      lateness = ordinal(policy.lateness),
      sessionEnd = ordinal(policy.gap),
      arrival = ordinal(policy.arrival),
      eventTimes = policy.eventTimes,
      kept = ordinal(keptRow),
      keptWidth = keptRow.map(_.dataType.asInstanceOf[StructType].length).getOrElse(0),
      stringKey =
        if (stringKeys && keys.size == 1 && keys.head.dataType == StringType && policy.source.isEmpty &&
          policy.dedup.isEmpty) {
          ordinal(keys.headOption)
        } else -1,
      // (keys..., window start[, source][, dedup]): the source (min of inputs) is part of the
      // grouping, because the operator needs each source's max; the dedup values, because a
      // partial must hold one row's values (the operator keeps or drops it whole).
      groupKey = (keys.map(bound) :+ BoundReference(in.size, LongType, nullable = false)) ++
        policy.source.map(bound).toSeq ++ policy.dedup.map(bound).toSeq,
      dedupKey = policy.dedup.map(d => (keys :+ d).map(bound)).getOrElse(Nil),
      // 0 outside a task (a plan evaluated on the driver).
      partition = TaskContext.getPartitionId().toLong)
  }
}

/** (input row, window start) -> grouping key; a class, not a Function2, so the Long is not boxed per row. */
private[partials] final class GroupKeyProjection(groupKey: Seq[Expression]) {
  private val project = UnsafeProjection.create(groupKey)
  private val start = new SpecificInternalRow(Seq(LongType))
  private val joined = new JoinedRow

  def apply(row: InternalRow, windowStart: Long): UnsafeRow = {
    start.setLong(0, windowStart)
    project(joined(row, start))
  }
}

/** Counts the invalid rows of a partition per reason, keeping the first of each (its key labels the sentinel). */
private final class InvalidRowCounter(reasonOrdinal: Int) {
  val counts = new Array[Long](InvalidRows.Reasons.max + 1)
  val first = new Array[InternalRow](InvalidRows.Reasons.max + 1)

  /** Forgets the counts (real-time mode: one row at a time, see [[RowPartials]]). */
  def reset(): Unit = {
    java.util.Arrays.fill(counts, 0L)
    java.util.Arrays.fill(first.asInstanceOf[Array[AnyRef]], null)
  }

  /** True (and counted) if the row is invalid. */
  def skip(row: InternalRow): Boolean = {
    val reason = if (reasonOrdinal >= 0) row.getInt(reasonOrdinal) else InvalidRows.Valid
    if (reason == InvalidRows.Valid) false
    else {
      if (counts(reason) == 0) first(reason) = row.copy()
      counts(reason) += 1
      true
    }
  }

  /** One sentinel partial per reason that occurred (see input.InvalidRows), labelled with its first row's key. */
  def sentinels(
      agg: CatalystAggregation,
      keyAttrs: Seq[Attribute],
      policyCols: PolicyColumns,
      in: Seq[Attribute],
      out: PartialOutput): Iterator[InternalRow] =
    InvalidRows.Reasons.iterator.filter(r => counts(r) > 0).map { r =>
      val p = new Partial(agg.newBuffer(), InvalidRows.sentinelStart(r))
      p.rows = counts(r)
      // The sentinel's key (and source) columns, from its first row; a null source stays null.
      val key = InternalRow.fromSeq(keyAttrs.indices.map(i => first(r).get(i, keyAttrs(i).dataType)) ++ Seq(0L) ++
        policyCols.source.map(s => first(r).get(in.indexWhere(_.exprId == s.exprId), s.dataType)).toSeq ++
        policyCols.dedup.map(_ => null).toSeq)
      out.generic(key, p.start, p)
    }
}

/**
 * Builds the output rows of the partial aggregation: payload bytes, window start, row count,
 * max event time, keys. `keptType` is the type of a kept row, when rows are kept.
 */
private final class PartialOutput(
    payloadSchema: StructType,
    outAttrs: Seq[Attribute],
    keyAttrs: Seq[Attribute],
    agg: CatalystAggregation,
    policyCols: PolicyColumns,
    keptType: Option[DataType]) {
  private val n = keyAttrs.size
  private val keyTypes = keyAttrs.map(_.dataType).toArray
  private val project = UnsafeProjection.create(
    outAttrs.indices.map(i => BoundReference(i, outAttrs(i).dataType, outAttrs(i).nullable)))
  private val outer = new SpecificInternalRow(outAttrs.map(_.dataType))
  // Only for on-heap partials (the generic path and sentinels).
  private lazy val projectPayload = UnsafeProjection.create(payloadSchema)
  private lazy val meta = new SpecificInternalRow(Seq(LongType, LongType, LongType))
  private lazy val policyPart = new SpecificInternalRow(
    policyCols.lateness.map(_ => LongType).toSeq ++ policyCols.gap.map(_ => LongType).toSeq ++
      policyCols.arrival.map(_ => LongType).toSeq ++
      (if (policyCols.eventTimes) Seq(ArrayType(LongType, containsNull = false)) else Nil) ++
      policyCols.source.map(_.dataType).toSeq ++
      policyCols.dedup.toSeq.flatMap(d => Seq(d.dataType, LongType, LongType)) ++ keptType.toSeq)
  private val dedupOrdinal = n + 1 + policyCols.source.size

  /** The output row (reused by the next call) for a payload; `key` holds the key values first. */
  def apply(key: InternalRow, start: Long, rows: Long, maxEventTime: Long, payload: Array[Byte]): InternalRow = {
    outer.update(0, payload)
    outer.setLong(1, start)
    outer.setLong(2, rows)
    outer.setLong(3, maxEventTime)
    var i = 0
    while (i < n) { outer.update(4 + i, key.get(i, keyTypes(i))); i += 1 }
    project(outer)
  }

  /** The output row of an on-heap [[Partial]]; `key` holds the key values, window start, source, dedup values. */
  def generic(key: InternalRow, start: Long, p: Partial): InternalRow = {
    meta.setLong(0, start)
    meta.setLong(1, p.rows)
    meta.setLong(2, p.maxEventTime)
    var i = 0
    if (policyCols.lateness.isDefined) { policyPart.setLong(i, p.maxLateness); i += 1 }
    if (policyCols.gap.isDefined) { policyPart.setLong(i, p.maxEnd); i += 1 }
    if (policyCols.arrival.isDefined) { policyPart.setLong(i, p.maxArrival); i += 1 }
    if (policyCols.eventTimes) { policyPart.update(i, new GenericArrayData(p.eventTimes.toArray[Any])); i += 1 }
    policyCols.source.foreach { s => policyPart.update(i, key.get(n + 1, s.dataType)); i += 1 }
    policyCols.dedup.foreach { d =>
      policyPart.update(i, key.get(dedupOrdinal, d.dataType))
      policyPart.setLong(i + 1, p.partition)
      policyPart.setLong(i + 2, p.duplicates)
      i += 3
    }
    if (keptType.isDefined) policyPart.update(i, p.keptRows)
    val payload = UnsafeRowBytes.bytes(
      projectPayload(new JoinedRow(new JoinedRow(agg.toStored(p.buffer), meta), policyPart)))
    apply(key, start, p.rows, p.maxEventTime, payload)
  }
}
