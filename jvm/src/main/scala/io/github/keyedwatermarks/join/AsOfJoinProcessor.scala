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
      return out.iterator
    }
    var max = state.maxReading()
    var versions = state.keyVersions()
    val held = mutable.ArrayBuffer.from(state.heldReadings())
    val before = max
    rows.foreach { r =>
      if (r.getInt(plan.sideOrdinal) == AsOfJoinPlan.VersionSide) {
        if (!r.isNullAt(plan.timeOrdinal))
          versions =
            AsOfRule.put(versions, AsOfRule.Version(r.getLong(plan.timeOrdinal), r.getStruct(plan.versionOrdinal)))
      } else if (r.isNullAt(plan.timeOrdinal)) out += invalid(r)
      else {
        val t = r.getLong(plan.timeOrdinal)
        val reading = r.getStruct(plan.readingOrdinal)
        if (AsOfRule.late(t, before, plan.latenessMicros)) out += joined(reading, None, AsOfJoinPlan.Late)
        else held += ((t, reading))
        max = Some(max.fold(t)(math.max(_, t)))
      }
    }
    step(max, held.toVector, versions, timerValues, out)
  }

  override def handleExpiredTimer(
      key: Row, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo): Iterator[Row] =
    step(state.maxReading(), state.heldReadings(), state.keyVersions(), timerValues, mutable.ArrayBuffer.empty)

  /** Releases what the versions watermark passed, prunes, stores, and sets the held readings' timers. */
  private def step(max: Option[Long], held: Vector[(Long, Row)], versions0: Vector[AsOfRule.Version[Row]],
      timerValues: TimerValues, out: mutable.ArrayBuffer[Row]): Iterator[Row] = {
    val watermarkMs = timerValues.getCurrentWatermarkInMs()
    val (release, keep) = held.partition { case (t, _) => AsOfRule.released(t, watermarkMs) }
    release.foreach { case (t, reading) =>
      val v = AsOfRule.validAt(versions0, t)
      out += joined(reading, v.map(_.row), if (v.isDefined) AsOfJoinPlan.Joined else AsOfJoinPlan.NoVersion)
    }
    val versions = AsOfRule.prune(versions0, max, plan.latenessMicros, keep.map(_._1))
    state.store(max, keep, versions)
    if (keep.nonEmpty) {
      val set = getHandle.listTimers().toSet
      keep.iterator.map { case (t, _) => AsOfRule.timerMs(t) }.toSet.filterNot(set.contains)
        .foreach(ms => getHandle.registerTimer(ms))
    }
    out.iterator
  }

  private def invalid(r: Row): Row = joined(r.getStruct(plan.readingOrdinal), None, AsOfJoinPlan.Invalid)

  /** The output row: the reading's columns, the version's other than the keys (or nulls), the status. */
  private def joined(reading: Row, version: Option[Row], status: String): Row = {
    val values = new Array[Any](plan.outputWidth)
    var i = 0
    while (i < reading.length) { values(i) = reading.get(i); i += 1 }
    version.foreach { v =>
      var j = 0
      while (j < plan.versionOutput.length) { values(i + j) = v.get(plan.versionOutput(j)); j += 1 }
    }
    values(plan.outputWidth - 1) = status
    Row.fromSeq(values.toSeq)
  }
}
