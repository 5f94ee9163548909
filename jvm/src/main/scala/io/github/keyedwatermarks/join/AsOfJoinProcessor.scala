package io.github.keyedwatermarks.join

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.streaming.{ExpiredTimerInfo, OutputMode, StatefulProcessor, TimeMode, TimerValues}

/**
 * The per-key as-of join, run by `transformWithState` in event-time mode over the union of
 * both sides (see [[AsOfJoinPlan]] for the input's columns). Called once per key and
 * micro-batch with the key's rows of that batch, and by an event-time timer for a key with
 * held readings and no rows: versions go into the key's state, readings are late or held, then
 * the held readings the versions watermark passed are joined and emitted, and the key's
 * versions are pruned to its horizon (docs/semantics.md, "As-of join"; the rule: [[AsOfRule]]).
 * Each call ends with its metrics row ([[JoinMetrics]]).
 */
private[keyedwatermarks] final class AsOfJoinProcessor(plan: AsOfJoinPlan.Operator)
    extends StatefulProcessor[Row, Row, Row] {

  @transient private var state: AsOfJoinState = _

  override def init(outputMode: OutputMode, timeMode: TimeMode): Unit =
    state = new AsOfJoinState(getHandle, plan.readingSchema, plan.versionSchema)

  override def handleInputRows(key: Row, rows: Iterator[Row], timerValues: TimerValues): Iterator[Row] = {
    val out = mutable.ArrayBuffer.empty[Row]
    if (key.anyNull) {
      // A null key matches nothing: its readings are invalid, its versions cannot be placed.
      rows.foreach(r => if (r.getInt(plan.sideOrdinal) == AsOfJoinPlan.ReadingSide) out += invalid(r))
      out += plan.output.keyRow(out, key = false, 0L, None)
      return out.iterator
    }
    val maxBefore = state.maxReading()
    var max = maxBefore
    val versionsBefore = state.keyVersions()
    var versions = versionsBefore
    val newlyHeld = mutable.ArrayBuffer.empty[(Long, Row)]
    rows.foreach { r =>
      if (r.getInt(plan.sideOrdinal) == AsOfJoinPlan.VersionSide) {
        if (!r.isNullAt(plan.timeOrdinal))
          versions =
            AsOfRule.put(versions, AsOfRule.Version(r.getLong(plan.timeOrdinal), r.getStruct(plan.versionOrdinal)))
      } else if (r.isNullAt(plan.timeOrdinal)) out += invalid(r)
      else {
        val t = r.getLong(plan.timeOrdinal)
        val reading = r.getStruct(plan.readingOrdinal)
        if (AsOfRule.late(t, maxBefore, plan.latenessMicros)) out += joined(reading, None, AsOfJoinPlan.Late)
        else newlyHeld += ((t, reading))
        max = Some(max.fold(t)(math.max(_, t)))
      }
    }
    if (max != maxBefore) max.foreach(state.storeMaxReading) // it only grows: never back to none
    step(state.heldReadings(), newlyHeld.toVector, versionsBefore, versions, max, timerValues, out, keyRow = true)
  }

  override def handleExpiredTimer(
      key: Row, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo): Iterator[Row] = {
    val versions = state.keyVersions()
    // A timer that releases nothing fired for a key whose rows of this batch released its
    // readings already (its call came first): that key has its metrics row, from that call.
    step(state.heldReadings(), Vector.empty, versions, versions, state.maxReading(), timerValues,
      mutable.ArrayBuffer.empty, keyRow = false)
  }

  /**
   * Releases the held readings (those held before this call, then the call's new ones) that the
   * versions watermark passed, prunes the versions, stores what changed, and sets the timers of
   * the call's new readings it keeps. Only changes are written: a call whose versions neither
   * grew nor were pruned leaves them as stored, and readings newly held beside no release are
   * appended. Each held reading's timer is registered once, when it is first held (a reading
   * held before this call has its timer already, not fired: a timer fires only once the
   * watermark passed its reading, which then is released), so the key's timers are not listed.
   */
  private def step(heldBefore: Vector[(Long, Row)], newlyHeld: Vector[(Long, Row)],
      versionsBefore: Vector[AsOfRule.Version[Row]], versionsIn: Vector[AsOfRule.Version[Row]],
      max: Option[Long], timerValues: TimerValues, out: mutable.ArrayBuffer[Row], keyRow: Boolean): Iterator[Row] = {
    val watermarkMs = timerValues.getCurrentWatermarkInMs()
    def isReleased(h: (Long, Row)): Boolean = AsOfRule.released(h._1, watermarkMs)
    val (releaseBefore, keepBefore) = heldBefore.partition(isReleased)
    val (releaseNew, keepNew) = newlyHeld.partition(isReleased)
    (releaseBefore ++ releaseNew).foreach { case (t, reading) =>
      val v = AsOfRule.validAt(versionsIn, t)
      out += joined(reading, v.map(_.row), if (v.isDefined) AsOfJoinPlan.Joined else AsOfJoinPlan.NoVersion)
    }
    val keep = keepBefore ++ keepNew
    val versions = AsOfRule.prune(versionsIn, max, plan.latenessMicros, keep.map(_._1))
    if (releaseBefore.nonEmpty) state.storeHeld(keep)
    else if (keepNew.nonEmpty) state.appendHeld(keepNew)
    // put and prune return the vector they got when they change nothing.
    if (!(versions eq versionsBefore)) state.storeVersions(versions)
    if (keepNew.nonEmpty) {
      val registered = keepBefore.iterator.map { case (t, _) => AsOfRule.timerMs(t) }.toSet
      keepNew.iterator.map { case (t, _) => AsOfRule.timerMs(t) }.toSet.diff(registered)
        .foreach(ms => getHandle.registerTimer(ms))
    }
    // The key's metrics row (a timer's call: only if it released readings): its readings held
    // and versions kept, its readings watermark.
    if (keyRow || releaseBefore.nonEmpty)
      out += plan.output.keyRow(out, key = true, keep.length + versions.length, max.map(_ - plan.latenessMicros))
    out.iterator
  }

  private def invalid(r: Row): Row = joined(r.getStruct(plan.readingOrdinal), None, AsOfJoinPlan.Invalid)

  /** The output row: the reading's columns, the version's other than the keys (or nulls), the status. */
  private def joined(reading: Row, version: Option[Row], status: String): Row =
    plan.output.row(reading, version.orNull, status)
}
