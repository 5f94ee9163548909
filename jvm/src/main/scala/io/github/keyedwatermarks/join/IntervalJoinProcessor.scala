package io.github.keyedwatermarks.join

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.streaming.{OutputMode, StatefulProcessor, TimeMode, TimerValues}

import io.github.keyedwatermarks.join.IntervalJoinState.Held

/**
 * The keyed interval join, run by `transformWithState` (no time mode) over the union of both
 * sides ([[JoinInputs]]: left the first side, right the second). Called once per key and
 * micro-batch with the key's rows of that batch: late rows come out at once, each new on-time
 * row is paired with the other side's kept rows and the batch's new ones, then the rows the other
 * side's watermark is past leave the state (docs/semantics.md, "Interval join"; the rule:
 * [[IntervalRule]]). A key's state changes only with its own rows, so there are no timers:
 * the join needs no watermark of Spark's and no no-data batch. Each call ends with its metrics
 * row ([[JoinMetrics]]).
 */
private[keyedwatermarks] final class IntervalJoinProcessor(plan: IntervalJoinPlan.Operator)
    extends StatefulProcessor[Row, Row, Row] {
  import IntervalJoinPlan.{Invalid, Joined, Late, Unmatched}

  @transient private var state: IntervalJoinState = _

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit =
    state = new IntervalJoinState(getHandle, plan.leftSchema, plan.rightSchema)

  override def handleInputRows(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    val out = mutable.ArrayBuffer.empty[Row]
    if (key.anyNull) { // a null key matches nothing
      rows.foreach(r => out += alone(r, Invalid))
      out += plan.output.keyRow(out, key = false, 0L, None)
      return out.iterator
    }
    val bounds = plan.bounds
    val keyBefore = state.key()
    val (maxLeftBefore, maxRightBefore) = (keyBefore.maxLeft, keyBefore.maxRight)
    var (maxLeft, maxRight) = (maxLeftBefore, maxRightBefore)
    val newLefts = mutable.ArrayBuffer.empty[Held]
    val newRights = mutable.ArrayBuffer.empty[Held]
    rows.foreach { r =>
      val isLeft = r.getInt(plan.layout.sideOrdinal) == JoinInputs.FirstSide
      if (r.isNullAt(plan.layout.timeOrdinal)) out += alone(r, Invalid)
      else {
        val t = r.getLong(plan.layout.timeOrdinal)
        // Late against the side's watermark as it stood before this batch; the max moves with every row.
        if (isLeft) {
          if (bounds.late(t, maxLeftBefore)) out += alone(r, Late)
          else newLefts += Held(t, r.getStruct(plan.layout.firstOrdinal), matched = false)
          maxLeft = Some(maxLeft.fold(t)(math.max(_, t)))
        } else {
          if (bounds.late(t, maxRightBefore)) out += alone(r, Late)
          else newRights += Held(t, r.getStruct(plan.layout.secondOrdinal), matched = false)
          maxRight = Some(maxRight.fold(t)(math.max(_, t)))
        }
      }
    }
    // Only a new on-time row of one side can pair with, or release, the other side's kept rows:
    // a late row is below its side's max, so it never moves the watermark.
    val keptLefts = if (newRights.nonEmpty) state.leftRows() else Vector.empty
    val keptRights = if (newLefts.nonEmpty) state.rightRows() else Vector.empty
    // Each pair once, in the batch of its later row: new lefts with every right (kept and new),
    // new rights with the kept lefts.
    val rights = (keptRights ++ newRights).sortBy(_.time)
    val rightTimes = rights.map(_.time)
    newLefts.foreach { l =>
      IntervalRule.within(rightTimes, l.time - bounds.beforeMicros, l.time + bounds.afterMicros).foreach { i =>
        out += plan.output.row(l.row, rights(i).row, Joined)
        l.matched = true
      }
    }
    var keptMatchedNow = false
    if (newRights.nonEmpty && keptLefts.nonEmpty) {
      val lefts = keptLefts.sortBy(_.time)
      val leftTimes = lefts.map(_.time)
      newRights.foreach { r =>
        IntervalRule.within(leftTimes, r.time - bounds.afterMicros, r.time + bounds.beforeMicros).foreach { i =>
          val l = lefts(i)
          out += plan.output.row(l.row, r.row, Joined)
          if (!l.matched) { l.matched = true; keptMatchedNow = true }
        }
      }
    }
    // Eviction: what the other side's watermark is past. Only changes are written: the new rows
    // kept are appended unless a kept row left or (left outer) became matched.
    def leftDone(l: Held) = bounds.leftDone(l.time, maxRight)
    val (keptLeftsDone, keptLeftsStay) = keptLefts.partition(leftDone)
    val (newLeftsDone, newLeftsStay) = newLefts.partition(leftDone)
    if (plan.kind == IntervalRule.Kind.LeftOuter)
      (keptLeftsDone ++ newLeftsDone).foreach(l => if (!l.matched) out += plan.output.row(l.row, null, Unmatched))
    val leftsReplaced = keptLeftsDone.nonEmpty || (keptMatchedNow && plan.kind == IntervalRule.Kind.LeftOuter)
    state.storeLefts(if (leftsReplaced) keptLeftsStay ++ newLeftsStay else newLeftsStay.toSeq, leftsReplaced)
    def rightDone(r: Held) = bounds.rightDone(r.time, maxLeft)
    val keptRightsStay = keptRights.filterNot(rightDone)
    val newRightsStay = newRights.filterNot(rightDone)
    val rightsReplaced = keptRightsStay.length < keptRights.length
    state.storeRights(if (rightsReplaced) keptRightsStay ++ newRightsStay else newRightsStay.toSeq, rightsReplaced)
    val keyAfter = IntervalJoinState.KeyRow(maxLeft, maxRight,
      newLeftsStay.length + (if (leftsReplaced) keptLeftsStay.length else keyBefore.leftRows),
      newRightsStay.length + (if (rightsReplaced) keptRightsStay.length else keyBefore.rightRows))
    if (keyAfter != keyBefore) state.storeKey(keyAfter)
    // The key's join watermark: the lower of its two sides' (all pairs below it are out).
    val watermark = for (l <- maxLeft; r <- maxRight) yield math.min(l, r) - bounds.latenessMicros
    out += plan.output.keyRow(out, key = true, keyAfter.leftRows + keyAfter.rightRows, watermark)
    out.iterator
  }

  /** A row of one side alone (late or invalid): the other side's columns null. */
  private def alone(r: Row, status: String): Row =
    if (r.getInt(plan.layout.sideOrdinal) == JoinInputs.FirstSide)
      plan.output.row(r.getStruct(plan.layout.firstOrdinal), null, status)
    else plan.output.row(null, r.getStruct(plan.layout.secondOrdinal), status)
}
