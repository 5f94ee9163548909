package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.streaming.{StatefulProcessorHandle, TimerValues}

import io.github.keyedwatermarks.state.OpenWindow
import io.github.keyedwatermarks.watermark.{EventTimeClock, HeldWatermark, IdleClockNow, KeyRecord, WatermarkPolicy}

/**
 * Where a key's timers go (only for policies that follow a clock): the event-time rule (max_skew,
 * closing='global': when Spark's global watermark lets the key's floor reach its earliest open
 * window) and the processing-time rule (idleness, a source turning idle, a processing-time
 * floor). One timer per key at a time; the handlers of the processor say what a fired timer does.
 */
private[operator] final class KeyTimers(
    handle: StatefulProcessorHandle, policy: WatermarkPolicy, closing: WindowClosing) {
  // The floors by the clock of their timers (event time: Spark's global watermark; the others
  // follow the wall clock or the arrival clock, whose timers scheduleProcessingTimer sets).
  private val eventTimeFloors = policy.floors.filter(_.clock == EventTimeClock)
  private val processingTimeFloors = policy.floors.filter(_.clock != EventTimeClock)

  /**
   * The key's event-time timer (max_skew, closing='global') for the state about to be stored:
   * the one registered is kept while it is no later than needed ([[eventTimer]]) and still
   * ahead of Spark's global watermark; otherwise it is replaced. A key whose own rows close
   * its windows moves its earliest window every window, and moving a timer is two deletes and
   * two puts in the state store; a timer kept that fires before it
   * is needed finds nothing due and moves then ([[timerFired]]). Never later than
   * needed, so a window the floor closes is still emitted in the batch in which Spark's
   * global watermark gets there.
   */
  def placeEventTimer(batch: KeyBatch): Unit = {
    val wanted = eventTimer(batch.record, batch.windows)
    val globalMs = batch.timerValues.getCurrentWatermarkInMs()
    val keep = batch.eventTimerMs.exists(t => t > globalMs && wanted.exists(t <= _))
    if (!keep) {
      batch.eventTimerMs.foreach(handle.deleteTimer)
      wanted.foreach(handle.registerTimer)
      batch.eventTimerMs = wanted
    }
  }

  /** Deletes the key's event-time timer (the key leaves state). */
  def dropEventTimer(batch: KeyBatch): Unit = {
    batch.eventTimerMs.foreach(handle.deleteTimer)
    batch.eventTimerMs = None
  }

  /**
   * A timer of the key just fired (Spark deletes it after the handler). An event-time timer
   * kept from an earlier batch may fire before the floor reaches the key's earliest window:
   * then nothing is due, and it is replaced by the one needed, written into the stored row as
   * it was (so the key's watermark and metrics look as if it had not fired). Returns whether
   * the timer fired that early.
   */
  def timerFired(batch: KeyBatch): Boolean = {
    batch.eventTimerMs = None
    if (!policy.usesGlobalWatermark) return false
    val wanted = eventTimer(batch.record, batch.windows)
    wanted.filter(_ > batch.timerValues.getCurrentWatermarkInMs()) match {
      case Some(t) =>
        handle.registerTimer(t)
        batch.storeEventTimer(t)
        true
      case None => false
    }
  }

  /**
   * The event-time timer of a key (max_skew, closing='global'): when Spark's global watermark
   * (ms) will let the key's floor reach the threshold of its earliest open window.
   */
  private def eventTimer(record: KeyRecord, windows: mutable.LongMap[OpenWindow]): Option[Long] =
    if (windows.isEmpty) {
      // closing='fleet': a key kept without windows leaves when the floors that cover a returning
      // key reach its watermark (WatermarkPolicy.releasable).
      if (policy.floors.forall(_.appliesAtStart) || record.watermark == HeldWatermark.Undefined) None
      else earliest(eventTimeFloors.filter(_.coversReturningKey).flatMap(_.reaches(record.watermark, record)))
        .map(math.max(_, FirstEventTimerMs))
    } else {
      val next = windows.values.iterator.map(closing.threshold(_, record.watermark)).min
      // Never at or below 0 ms: while Spark's global watermark is still 0 (no watermark yet, the
      // first batch) Spark fires such a timer at once, in the same batch, where it cannot close
      // anything, and then deletes it, dropping the registration the handler just renewed. From
      // 1 ms it fires in the first batch with a real watermark. A watermark above 0 has already
      // closed every window whose timer would be at or below it (its floor is applied first).
      earliest(eventTimeFloors.flatMap(_.reaches(next, record))).map(math.max(_, FirstEventTimerMs))
    }

  private def earliest(times: Seq[Long]): Option[Long] = if (times.isEmpty) None else Some(times.min)

  /** The earliest event-time timer registered (see [[eventTimer]]). */
  private val FirstEventTimerMs = 1L

  /**
   * Registers the key's next timer on the idle clock or the wall clock (a processing-time timer,
   * or an event-time timer on the arrival clock: see watermark.IdleClockNow): when the key turns
   * idle or is forgotten, when a source turns idle, or when the clock will close the key's
   * earliest open window. (Event-time timers of the floors on Spark's global watermark:
   * [[placeEventTimer]].)
   */
  def scheduleProcessingTimer(batch: KeyBatch, timerValues: TimerValues): Unit = {
    if (!policy.usesClockTimers || policy.usesGlobalWatermark) return
    handle.listTimers().foreach(t => handle.deleteTimer(t))
    if (batch.released) return
    val record = batch.update.record
    // The watermark at which the earliest open window next changes (fires or expires).
    val next =
      if (batch.windows.isEmpty) None else Some(batch.windows.values.map(closing.threshold(_, record.watermark)).min)
    val times = mutable.ArrayBuffer.empty[Long]
    val now = IdleClockNow(policy, timerValues)
    policy.idle.foreach(rule => times ++= rule.nextTimer(record, hasOpenWindows = next.isDefined))
    next.foreach(t => processingTimeFloors.foreach(f => times ++= f.reaches(t, record)))
    times ++= batch.update.sourceIdleTimes
    for (i <- times.indices) if (times(i) <= now) times(i) = now + 1
    if (times.nonEmpty) handle.registerTimer(times.min)
  }
}
