package io.github.keyedwatermarks.partials

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions._
import org.apache.spark.sql.catalyst.expressions.aggregate.{AggregateExpression, Count, Max, Partial}
import org.apache.spark.sql.execution.{ExpandExec, FilterExec, ProjectExec, SparkPlan}
import org.apache.spark.sql.execution.aggregate.HashAggregateExec
import org.apache.spark.sql.types.{BinaryType, BooleanType, IntegerType, LongType}

import io.github.keyedwatermarks.catalyst.{ProjectionPool, TwoLevelMapChoice, UnsafeRowBytes}
import io.github.keyedwatermarks.input.{InvalidRows, ProjectedInput}
import io.github.keyedwatermarks.shims.HashAggregateWithoutTwoLevelMap
import io.github.keyedwatermarks.window.{
  AlignedWindows, SessionWindows, SlidingWindows, TumblingWindows, WindowAssigner
}

/**
 * The partial aggregation planned as Spark's own operators, when every payload field is
 * fixed-width (numeric buffers; no kept rows, event times or sources):
 *
 *   input -> window start per row (ProjectExec; for sliding windows ExpandExec + FilterExec,
 *   as Spark's TimeWindowing plans `window(ts, size, slide)`) -> HashAggregateExec in Partial
 *   mode, grouped by (keys, window start) -> [[PartialPayloadExec]].
 *
 * Whole-stage codegen fuses the scan, the input projection, the window assignment and the
 * hash aggregation into one generated loop per partition, as for Spark's own aggregation, so
 * a row is never materialized between them; Spark's map also spills and falls back to sorting
 * when task memory runs out. The partial carries, besides the user's aggregate buffers, its
 * row count (`count` over the rows whose *last* window it is), its max event time and the
 * policy's maxima (`max`): the payload layout of [[PartialAggregation]].
 *
 * Spark's two-level hash map is used while the micro-batches before had no more partials
 * per task than its first level holds ([[TwoLevelMapChoice]]).
 *
 * Invalid rows (non-zero `kw_invalid_code`) go, once each, to the window start
 * `InvalidRows.sentinelStart(reason)`: one sentinel partial per (key, reason) and partition,
 * which `InvalidRows.observe` counts and drops. Aggregates do see the sentinels' rows (their
 * buffers are dropped with the sentinel).
 */
private[partials] object HashAggregatePartials {

  /**
   * The most ExpandExec copies (windows per row, size / slide) this plan makes: each copy is a
   * case in the generated loop, and past this the loop outgrows what the JIT compiles
   * (benchmarks/results/profile.md). Sliding windows with more overlap take the on-heap path.
   */
  val MaxExpandCopies = 64

  /** Whether the windows fit this plan (see [[MaxExpandCopies]]). */
  def supports(windows: WindowAssigner): Boolean = windows.windowsPerRow <= MaxExpandCopies

  def plan(p: KeyedPartialAggregate, child: SparkPlan): SparkPlan = {
    val t = p.eventTime
    // Input columns by name from `inputs`, which the plan keeps current across micro-batches.
    def column(name: String) = p.inputs.find(_.name == name)
    val code = column(ProjectedInput.InvalidReasonCode)
    val valid = code.map(c => EqualTo(c, Literal(InvalidRows.Valid)))
    val (lastStart, slide) = p.windows match {
      case _: SessionWindows => (t, 0L)
      case w: AlignedWindows => (w.lastWindowStart(t), w.slideMicros)
    }
    def start(i: Int): Expression = {
      val s = if (i == 0) lastStart else Subtract(lastStart, Literal(i * slide))
      code.fold(s)(c => If(valid.get, s, Add(Literal(Long.MinValue), Cast(c, LongType))))
    }
    val startAttr = AttributeReference(PartialColumns.WindowStart, LongType)()
    val (windowed, lastWindow) = p.windows match {
      case w: SlidingWindows =>
        // A row is in its i-th window (0 = the last) while that window's end is after it: up
        // to ceil(size / slide) copies, filtered, as Spark's own sliding window() is planned.
        val copies = w.windowsPerRow.toInt
        val isLast = AttributeReference("kw_last_window", BooleanType, nullable = false)()
        val expand = ExpandExec(
          Seq.tabulate(copies)(i => child.output ++ Seq(start(i), Literal(i == 0))),
          child.output ++ Seq(startAttr, isLast), child)
        val inWindow = GreaterThan(Add(startAttr, Literal(w.sizeMicros)), t)
        (FilterExec(valid.fold[Expression](inWindow)(v => If(v, inWindow, isLast)), expand), Some(isLast))
      case _: TumblingWindows | _: SessionWindows =>
        (ProjectExec(child.output :+ Alias(start(0), startAttr.name)(startAttr.exprId), child), None)
    }
    // Counted in its last window only, so that a row counts as late once (see OnHeapPartials).
    val rows = Count(lastWindow.fold[Expression](Literal(1))(l => If(l, Literal(1), Literal(null, IntegerType))))
    val maxima =
      Max(t) +: (column(PartialColumns.Lateness).toSeq ++ column(PartialColumns.RowSessionEnd).toSeq ++
        column(PartialColumns.Arrival).toSeq).map(Max(_))
    val aggregates = p.aggregation.aggregateExpressionsOver(p.inputs).map(_.copy(mode = Partial)) ++
      (rows +: maxima).map(AggregateExpression(_, Partial, isDistinct = false))
    val grouping = p.keys :+ startAttr
    val buffers = aggregates.map(_.aggregateFunction.inputAggBufferAttributes)
    val sparkAggregate = HashAggregateExec(
      requiredChildDistributionExpressions = None,
      isStreaming = false,
      numShufflePartitions = None,
      groupingExpressions = grouping,
      aggregateExpressions = aggregates,
      aggregateAttributes = aggregates.map(_.resultAttribute),
      initialInputBufferOffset = 0,
      resultExpressions = grouping ++ buffers.flatten,
      child = windowed)
    val hashAggregate =
      if (p.twoLevelMap.useTwoLevelMap(child.conf)) sparkAggregate
      else HashAggregateWithoutTwoLevelMap(sparkAggregate)
    // Payload: the user's buffers, window start, row count, then the maxima (never null for a
    // real partial: Long.MinValue stands for "none", as in OnHeapPartials).
    val user = buffers.dropRight(1 + maxima.size).flatten
    val rowCount = buffers(buffers.size - 1 - maxima.size).head
    val maxPayload = buffers.takeRight(maxima.size).map(b => Coalesce(Seq(b.head, Literal(Long.MinValue))))
    val payload = user ++ Seq(KnownNotNull(startAttr), rowCount) ++ maxPayload
    PartialPayloadExec(p.keys, payload, startAttr, rowCount, maxPayload.head, p.output, p.twoLevelMap, hashAggregate)
  }
}

/**
 * Turns Spark's partial aggregates into [[PartialAggregation]]'s output rows: payload bytes
 * (`payload` projected to an UnsafeRow), window start, row count, max event time, keys. Once
 * per partial.
 */
private[keyedwatermarks] case class PartialPayloadExec(
    keys: Seq[Attribute],
    payload: Seq[Expression],
    windowStart: Attribute,
    rows: Attribute,
    maxEventTime: Expression,
    output: Seq[Attribute],
    twoLevelMap: TwoLevelMapChoice,
    child: SparkPlan)
    extends KeyedPartialNode {

  override protected def withNewChildInternal(newChild: SparkPlan): PartialPayloadExec = copy(child = newChild)
  override protected def path: String = "hash-aggregate"

  override protected def doExecute(): RDD[InternalRow] = {
    val in = child.output
    val payloadExprs = payload
    val bytes = AttributeReference(PartialColumns.Payload, BinaryType, nullable = false)()
    val outExprs = Seq(bytes, windowStart, rows, maxEventTime) ++ keys
    val numPartials = longMetric("numPartials")
    val partialsRdd = child.execute()
    twoLevelMap.record(numPartials, partialsRdd.getNumPartitions)
    partialsRdd.mapPartitions { partials =>
      val toPayload = ProjectionPool.unsafe(payloadExprs, in)
      val toOutput = ProjectionPool.unsafe(outExprs, bytes +: in)
      val holder = new SpecificInternalRow(Seq(BinaryType))
      val joined = new JoinedRow
      partials.map { partial =>
        numPartials += 1
        holder.update(0, UnsafeRowBytes.bytes(toPayload(partial)))
        toOutput(joined(holder, partial))
      }
    }
  }
}
