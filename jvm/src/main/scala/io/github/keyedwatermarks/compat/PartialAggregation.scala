package io.github.keyedwatermarks.compat

import java.util.{LinkedHashMap => JLinkedHashMap}

import scala.jdk.CollectionConverters._

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.catalyst.util.{ArrayData, GenericArrayData}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.types.{ArrayType, BinaryType, LongType, StringType, StructType}
import org.apache.spark.unsafe.types.UTF8String

import io.github.keyedwatermarks.input.{InvalidRows, ProjectedInput}
import io.github.keyedwatermarks.window.WindowAssigner

/**
 * Pre-aggregation before the shuffle, as Spark's own aggregation does: within each input
 * partition of a micro-batch, rows are folded into one partial per (key, window). Lateness is
 * decided per (key, window) against the watermark at the start of the batch, so a partial is
 * wholly on time or wholly late; it carries its row count (for late accounting) and its max
 * event time (for the watermark). Only partials are shuffled, sorted and handed to the
 * stateful operator.
 *
 * Output: `kw_payload`, `kw_window_start`, `kw_rows`, then the key columns. The payload is the
 * partial as UnsafeRow bytes (compat.UnsafeRowBytes; the operator reads it with
 * [[Partials.payloadSchema]]): stored buffer fields b0..bn first (so a payload row is directly
 * the right-hand side of CatalystAggregation.merge), then window start, row count, max event
 * time, then the optional watermark-policy columns (`kw_lateness_us`: the partial's max
 * per-row lateness; `kw_session_end`; `kw_event_times`: every row's event time, for adaptive
 * lateness; `kw_source`: the source, part of the grouping for min of inputs), then the kept
 * rows. `kw_rows` counts the rows whose *last* window is this one, so that with sliding
 * windows a row counts as late only when all its windows are closed. Window start and row
 * count are also columns of their own, for the input metrics before the shuffle.
 *
 * Invalid input rows (a non-zero `kw_invalid_code`) are skipped and counted: per partition and
 * reason, one sentinel partial (window start `InvalidRows.sentinelStart(reason)`, the count in
 * `kw_rows`, the key of the first such row) that `InvalidRows.observe` counts and then drops.
 */
object PartialAggregation {
  val Payload = "kw_payload"
  val WindowStart = "kw_window_start"
  val Rows = "kw_rows"
  val MaxEventTime = "kw_max_event_time"
  val KeptRows = "kw_kept_rows"
  val EventTimes = "kw_event_times"
  /** Optional input columns the partials carry (see input.ProjectedInput). */
  val Lateness = "kw_lateness_us"
  val Source = "kw_source"
  /** A row's own session end, t + gap, in microseconds (input; per-row gaps), and a session partial's end (output). */
  val RowSessionEnd = "kw_row_session_end_us"
  val SessionEnd = "kw_session_end"

  /**
   * @param input     rows with the key columns first, then the event time (micros), then the
   *                  aggregates' inputs, the policy's columns (found by name), the invalid-row
   *                  reason code `kw_invalid_code` and, with `keepRows`, the original row
   * @param keyCount  number of key columns
   * @param keepRows  the last input column is the original row (a struct): keep each row in
   *                  the partial that counts it, as the payload's last field `kw_kept_rows`,
   *                  so that the operator can emit it if it turns out late
   */
  def apply(
      input: DataFrame,
      keyCount: Int,
      windows: WindowAssigner,
      aggregation: CatalystAggregation,
      keepRows: Boolean,
      keepEventTimes: Boolean = false): Partials = {
    val session = input.sparkSession
    install(session)
    val child = SparkInternals.analyzedPlan(input)
    val inputs = child.output
    val buffers = aggregation.bufferSchema.map(f => AttributeReference(f.name, f.dataType, nullable = true)())
    val meta = Seq(WindowStart, Rows, MaxEventTime).map(n => AttributeReference(n, LongType, nullable = false)())
    val kept = if (keepRows) Some(inputs.last) else None
    val keptOut = kept.map(a => AttributeReference(KeptRows, ArrayType(a.dataType, containsNull = false))()).toSeq
    val lateness = inputs.find(_.name == Lateness)
    val source = inputs.find(_.name == Source)
    val gap = inputs.find(_.name == RowSessionEnd)
    val policyOut = lateness.map(_ => AttributeReference(Lateness, LongType, nullable = false)()).toSeq ++
      gap.map(_ => AttributeReference(SessionEnd, LongType, nullable = false)()).toSeq ++
      (if (keepEventTimes) Seq(AttributeReference(EventTimes, ArrayType(LongType, containsNull = false), nullable = false)())
       else Nil) ++ source.toSeq
    val payload = DataTypeUtils.fromAttributes(buffers ++ meta ++ policyOut ++ keptOut)
    val output = Seq(AttributeReference(Payload, BinaryType, nullable = false)()) ++
      Seq(WindowStart, Rows).map(n => AttributeReference(n, LongType, nullable = false)()) ++ inputs.take(keyCount)
    val node = KeyedPartialAggregate(
      inputs.take(keyCount), inputs(keyCount), kept, PolicyColumns(lateness, keepEventTimes, source, gap),
      windows, aggregation, inputs, payload, output, child)
    Partials(SparkBridge.ofRows(session, node), payload)
  }

  private def install(session: SparkSession): Unit = synchronized {
    val experimental = session.experimental
    if (!experimental.extraStrategies.contains(KeyedPartialAggregateStrategy)) {
      experimental.extraStrategies = experimental.extraStrategies :+ KeyedPartialAggregateStrategy
    }
  }
}

/** The partials (see [[PartialAggregation]]) and the schema of their payload. */
final case class Partials(frame: DataFrame, payloadSchema: StructType)

/** The watermark-policy inputs a partial carries: lateness column, event times, source. */
final case class PolicyColumns(
    lateness: Option[Attribute], eventTimes: Boolean, source: Option[Attribute], gap: Option[Attribute])

/** Logical node; `inputs` lists every column read so column pruning keeps them. */
case class KeyedPartialAggregate(
    keys: Seq[Attribute],
    eventTime: Attribute,
    keptRow: Option[Attribute],
    policy: PolicyColumns,
    windows: WindowAssigner,
    aggregation: CatalystAggregation,
    inputs: Seq[Attribute],
    payload: StructType,
    output: Seq[Attribute],
    child: LogicalPlan) extends UnaryNode {
  override protected def withNewChildInternal(newChild: LogicalPlan): KeyedPartialAggregate = copy(child = newChild)
  override def producedAttributes: AttributeSet = AttributeSet(output.filterNot(keys.contains))
}

object KeyedPartialAggregateStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case p: KeyedPartialAggregate =>
      KeyedPartialAggregateExec(p.keys, p.eventTime, p.keptRow, p.policy, p.windows, p.aggregation, p.inputs,
        p.payload, p.output, planLater(p.child)) :: Nil
    case _ => Nil
  }
}

case class KeyedPartialAggregateExec(
    keys: Seq[Attribute],
    eventTime: Attribute,
    keptRow: Option[Attribute],
    policy: PolicyColumns,
    windows: WindowAssigner,
    aggregation: CatalystAggregation,
    inputs: Seq[Attribute],
    payload: StructType,
    output: Seq[Attribute],
    child: SparkPlan) extends UnaryExecNode {

  override protected def withNewChildInternal(newChild: SparkPlan): KeyedPartialAggregateExec = copy(child = newChild)
  override def producedAttributes: AttributeSet = AttributeSet(output.filterNot(keys.contains))

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
    child.execute().mapPartitions { rows =>
      val reorder: InternalRow => InternalRow =
        if (childOutput.map(_.exprId) == in.map(_.exprId)) identity else UnsafeProjection.create(in, childOutput)
      // Grouping key (keys..., window start) over JoinedRow(input row, window start).
      val windowStart = new SpecificInternalRow(Seq(LongType))
      val withStart = new JoinedRow
      // The source (min of inputs) is part of the grouping: the operator needs each source's max.
      val groupKey = UnsafeProjection.create(
        (keyAttrs.map(k => BindReferences.bindReference[Expression](k, in)) :+ BoundReference(in.size, LongType, nullable = false)) ++
          policyCols.source.map(s => BindReferences.bindReference[Expression](s, in)).toSeq)
      val latenessOrdinal = policyCols.lateness.map(l => in.indexWhere(_.exprId == l.exprId)).getOrElse(-1)
      val gapOrdinal = policyCols.gap.map(g => in.indexWhere(_.exprId == g.exprId)).getOrElse(-1)
      val tsOrdinal = in.indexWhere(_.exprId == ts.exprId)
      val invalidOrdinal = in.indexWhere(_.name == ProjectedInput.InvalidReasonCode)
      // Per reason: how many invalid rows, and the first one (its key labels the sentinel).
      val invalidCounts = new Array[Long](InvalidRows.Reasons.max + 1)
      val invalidFirst = new Array[InternalRow](InvalidRows.Reasons.max + 1)
      val keptOrdinal = kept.map(k => in.indexWhere(_.exprId == k.exprId)).getOrElse(-1)
      val keptWidth = kept.map(_.dataType.asInstanceOf[StructType].length).getOrElse(0)
      val partials = new JLinkedHashMap[UnsafeRow, Partial]()
      // Fast path for the common single STRING key without sources: partials by key value,
      // looked up with the row's own UTF8String (no grouping-key projection); the key's first
      // partial holds the others (see Partial.find).
      val stringKeyOrdinal =
        if (keyAttrs.size == 1 && keyAttrs.head.dataType == StringType && policyCols.source.isEmpty) {
          in.indexWhere(_.exprId == keyAttrs.head.exprId)
        } else -1
      val byStringKey = new java.util.HashMap[UTF8String, Partial](4096)
      def lookup(row: InternalRow, start: Long): Partial =
        if (stringKeyOrdinal >= 0) {
          val k = row.getUTF8String(stringKeyOrdinal)
          val first = byStringKey.get(k)
          var partial = if (first == null) null else first.find(start)
          if (partial == null) {
            partial = new Partial(agg.newBuffer(), start)
            if (first == null) byStringKey.put(k.clone(), partial) else first.add(partial)
          }
          partial
        } else {
          windowStart.setLong(0, start)
          val key = groupKey(withStart(row, windowStart))
          var partial = partials.get(key)
          if (partial == null) {
            partial = new Partial(agg.newBuffer(), start)
            partials.put(key.copy(), partial)
          }
          partial
        }
      while (rows.hasNext) {
        val row0 = reorder(rows.next())
        val invalid = if (invalidOrdinal >= 0) row0.getInt(invalidOrdinal) else InvalidRows.Valid
        if (invalid != InvalidRows.Valid) {
          if (invalidCounts(invalid) == 0) invalidFirst(invalid) = row0.copy()
          invalidCounts(invalid) += 1
        } else {
          val row = if (agg.retainsInputReferences) row0.copy() else row0
          val t = row.getLong(tsOrdinal)
          var last = true
          assigner.foreachWindowStart(t) { start =>
            val partial = lookup(row, start)
            agg.update(partial.buffer, row)
            // A row is counted (for late accounting) in its last window only: it is late iff
            // that window, the last of its windows to close, is closed.
            if (last) {
              partial.rows += 1
              if (keptOrdinal >= 0) partial.keep(row.getStruct(keptOrdinal, keptWidth).copy())
              if (policyCols.eventTimes) partial.eventTimes += t
              last = false
            }
            if (t > partial.maxEventTime) partial.maxEventTime = t
            if (latenessOrdinal >= 0) {
              val l = row.getLong(latenessOrdinal)
              if (l > partial.maxLateness) partial.maxLateness = l
            }
            if (gapOrdinal >= 0) {
              val end = row.getLong(gapOrdinal)
              if (end > partial.maxEnd) partial.maxEnd = end
            }
          }
        }
      }
      val n = keyAttrs.size
      val projectPayload = UnsafeProjection.create(payloadSchema)
      val project = UnsafeProjection.create(
        outAttrs.indices.map(i => BoundReference(i, outAttrs(i).dataType, outAttrs(i).nullable)))
      val outer = new SpecificInternalRow(outAttrs.map(_.dataType))
      val meta = new SpecificInternalRow(Seq(LongType, LongType, LongType))
      val policyTypes = policyCols.lateness.map(_ => LongType).toSeq ++ policyCols.gap.map(_ => LongType).toSeq ++
        (if (policyCols.eventTimes) Seq(ArrayType(LongType, containsNull = false)) else Nil) ++
        policyCols.source.map(_.dataType).toSeq
      val policyPart = new SpecificInternalRow(policyTypes ++ kept.map(_.dataType).toSeq)
      // (key values, window start, partial) of every partial, from whichever map was used.
      val entries: Iterator[(InternalRow, Long, Partial)] =
        if (stringKeyOrdinal >= 0) {
          byStringKey.entrySet().iterator().asScala.flatMap { e =>
            val keyRow = InternalRow(e.getKey)
            e.getValue.ofKey.map(p => (keyRow, p.start, p))
          }
        } else partials.entrySet().iterator().asScala.map(e => (e.getKey, e.getValue.start, e.getValue))
      val sentinels: Iterator[(InternalRow, Long, Partial)] = InvalidRows.Reasons.iterator
        .filter(r => invalidCounts(r) > 0).map { r =>
          val p = new Partial(agg.newBuffer(), InvalidRows.sentinelStart(r))
          p.rows = invalidCounts(r)
          // The sentinel's key (and source) columns, from its first row; a null source stays null.
          val first = invalidFirst(r)
          val key = InternalRow.fromSeq(keyAttrs.indices.map(i => first.get(i, keyAttrs(i).dataType)) ++ Seq(0L) ++
            policyCols.source.map(s => first.get(in.indexWhere(_.exprId == s.exprId), s.dataType)).toSeq)
          (key, InvalidRows.sentinelStart(r), p)
        }
      (entries ++ sentinels).map { case (key, start, p) =>
        meta.setLong(0, start)
        meta.setLong(1, p.rows)
        meta.setLong(2, p.maxEventTime)
        var i = 0
        if (policyCols.lateness.isDefined) { policyPart.setLong(i, p.maxLateness); i += 1 }
        if (policyCols.gap.isDefined) { policyPart.setLong(i, p.maxEnd); i += 1 }
        if (policyCols.eventTimes) { policyPart.update(i, new GenericArrayData(p.eventTimes.toArray[Any])); i += 1 }
        policyCols.source.foreach { s => policyPart.update(i, key.get(n + 1, s.dataType)); i += 1 }
        if (keptOrdinal >= 0) policyPart.update(i, p.keptRows)
        outer.update(0, UnsafeRowBytes.bytes(projectPayload(new JoinedRow(new JoinedRow(agg.toStored(p.buffer), meta),
          policyPart))))
        outer.setLong(1, start)
        outer.setLong(2, p.rows)
        i = 0
        while (i < n) { outer.update(3 + i, key.get(i, keyAttrs(i).dataType)); i += 1 }
        project(outer)
      }
    }
  }
}

/** One (key, window)'s partial within a partition: live buffer, window start, row count, max event time. */
private final class Partial(val buffer: InternalRow, val start: Long) {
  // Single-string-key path: a key's first partial holds the key's others. A key touches one or
  // two windows in a batch (a few with sliding windows), so a short chain beats a map per key;
  // sessions (a partial per distinct event time) can have many, so past 8 they go in a map.
  private var next: Partial = null
  private var chained = 0
  private var more: scala.collection.mutable.LongMap[Partial] = null

  /** This key's partial of the window starting at `start`, or null. */
  def find(start: Long): Partial =
    if (this.start == start) this
    else if (more != null) more.getOrNull(start)
    else {
      var p = next
      while (p != null && p.start != start) p = p.next
      p
    }

  def add(p: Partial): Unit =
    if (more != null) more.update(p.start, p)
    else if (chained < 8) { p.next = next; next = p; chained += 1 }
    else {
      more = scala.collection.mutable.LongMap.empty[Partial]
      var q = next
      while (q != null) { more.update(q.start, q); q = q.next }
      more.update(p.start, p)
      next = null
    }

  /** This partial and the others of its key. */
  def ofKey: Iterator[Partial] =
    Iterator.single(this) ++ (if (more != null) more.valuesIterator
                              else Iterator.iterate(next)(_.next).takeWhile(_ != null))

  var rows: Long = 0L
  var maxEventTime: Long = Long.MinValue
  var maxLateness: Long = Long.MinValue
  var maxEnd: Long = Long.MinValue
  /** Event times of the rows this partial counts (adaptive lateness only). */
  lazy val eventTimes = scala.collection.mutable.ArrayBuffer.empty[Long]
  private var kept: scala.collection.mutable.ArrayBuffer[InternalRow] = null
  def keep(row: InternalRow): Unit = {
    if (kept == null) kept = scala.collection.mutable.ArrayBuffer.empty
    kept += row
  }
  def keptRows: ArrayData = new GenericArrayData(if (kept == null) Array.empty[Any] else kept.toArray[Any])
}
