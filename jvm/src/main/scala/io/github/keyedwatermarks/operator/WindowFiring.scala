package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.JoinedRow

import io.github.keyedwatermarks.catalyst.CatalystAggregation
import io.github.keyedwatermarks.emission.{Firing, Pane, PaneRule, WindowEmitter}
import io.github.keyedwatermarks.state.{OpenWindow, OpenWindowRows}
import io.github.keyedwatermarks.watermark.ClosedWindows
import io.github.keyedwatermarks.window.{AlignedWindows, SessionWindows, WindowAssigner}

/**
 * Which of a key's windows fire at the end of a call, and what they emit: aligned windows
 * ([[closeWindows]]) and sessions, merged first ([[closeSessions]]), fire their panes by
 * [[Firing.pane]] and leave the key's windows once expired; an idle key's windows fire at once
 * ([[emitUnfired]]). Each pane as its accumulation mode says ([[fire]]).
 */
private[operator] final class WindowFiring(
    agg: CatalystAggregation, emitter: WindowEmitter, emission: PaneRule, windows: WindowAssigner,
    closing: WindowClosing) {

  /** emit='every <duration>': a window's early panes at least that much processing time apart. */
  private val spacedPanes = emission.earlyPaneIntervalMs > 0

  /** Whether an early pane of `window` may fire at processing time `nowMs` (emit='every <duration>'). */
  private def spaced(window: OpenWindow, nowMs: Long): Boolean =
    !spacedPanes || window.lastPaneMs == OpenWindowRows.NoPane ||
      nowMs - window.lastPaneMs >= emission.earlyPaneIntervalMs

  /** Fires the windows `watermarkNow` passed and evicts the expired ones: [[closeWindows]], [[closeSessions]]. */
  def close(keyValues: InternalRow, batch: KeyBatch, watermarkNow: Long, watermarkAtStart: Long): collection.Seq[Row] =
    windows match {
      case _: AlignedWindows => closeWindows(keyValues, batch, watermarkNow, watermarkAtStart)
      case _: SessionWindows => closeSessions(keyValues, batch, watermarkNow, watermarkAtStart)
    }

  /**
   * Sessions: merges the batch's intervals with the key's open sessions where they touch (start
   * <= end of the previous, as Spark's session_window merges); a session fires its panes by
   * [[Firing.pane]] (its on-time pane when the key's watermark passes its end, again as its
   * next revision whenever it changed since and is due, and with early firings at every change);
   * it leaves state when end + allowed lateness <= the watermark. A merged session continues the
   * highest revision count among its parts, has fired on time if one of them has, and with
   * accumulation='retracting' withdraws their last panes with its next pane.
   */
  private def closeSessions(
      keyValues: InternalRow, batch: KeyBatch, watermarkNow: Long, watermarkAtStart: Long): collection.Seq[Row] = {
    val sorted = (batch.windows.values ++ batch.intervals).toArray.sortBy(_.start)
    batch.intervals.clear()
    batch.windows.clear()
    val emitted = mutable.ArrayBuffer.empty[Row]
    var i = 0
    while (i < sorted.length) {
      var j = i + 1
      var end = sorted(i).end
      while (j < sorted.length && sorted(j).start <= end) { end = math.max(end, sorted(j).end); j += 1 }
      val start = sorted(i).start
      val session =
        if (j == i + 1) sorted(i)
        else {
          val parts = sorted.slice(i, j)
          val merged = new OpenWindow(start, end, agg.newBuffer(), parts.map(_.revisions).max, parts.exists(_.dirty),
            onTimeFired = parts.exists(_.onTimeFired))
          parts.foreach(p => agg.merge(merged.buffer, agg.toStored(p.buffer).copy()))
          if (emission.retracting) merged.replacedPanes = parts.iterator.flatMap(p => Option(p.previous)).toList
          merged
        }
      Firing.pane(emission, ClosedWindows.closedBy(end, watermarkNow), session.onTimeFired, session.dirty)
        .foreach(fire(keyValues, session, _, watermarkAtStart, batch.nowMs, emitted))
      if (!ClosedWindows.closedBy(end + closing.allowedLatenessMicros, watermarkNow))
        batch.windows.update(start, session)
      i = j
    }
    emitted
  }

  /**
   * Aligned windows: fires and evicts the key's windows for `watermarkNow`, in window order: a
   * window fires its first revision when due; with allowed lateness a window that already fired
   * and got rows in this batch (dirty) fires again as the next revision; expired windows leave
   * state.
   */
  private def closeWindows(
      keyValues: InternalRow, batch: KeyBatch, watermarkNow: Long, reportedWatermark: Long): collection.Seq[Row] = {
    val out = mutable.ArrayBuffer.empty[Row]
    batch.windows.values.toArray.sortBy(_.start).foreach { window =>
      Firing.pane(emission, closing.due(window, watermarkNow), window.onTimeFired, window.dirty,
        spaced(window, batch.nowMs)).foreach(fire(keyValues, window, _, reportedWatermark, batch.nowMs, out))
      if (closing.expired(window, watermarkNow)) batch.windows.remove(window.start)
    }
    out
  }

  /**
   * Emits the window's next pane, as its accumulation mode says: the whole window
   * (accumulating), the rows since its last pane (discarding: the buffer starts over), or the
   * whole window after a row withdrawing the last pane (retracting: the pane's result is kept;
   * a merged session withdraws the last panes of the sessions it replaces).
   */
  private def fire(
      keyValues: InternalRow, window: OpenWindow, pane: Pane, reported: Long, nowMs: Long,
      out: mutable.Growable[Row]): Unit = {
    val result = agg.result(windowGroup(keyValues, window.start, window.end), window.buffer)
    if (emission.retracting) {
      if (window.previous != null)
        out += emitter.window(window.previous, pane, window.revisions, retraction = true, reported)
      window.replacedPanes.foreach(p =>
        out += emitter.window(p, pane, window.revisions, retraction = true, reported))
      window.replacedPanes = Nil
    }
    out += emitter.window(result, pane, window.revisions, retraction = false, reported)
    emission.accumulation match {
      case PaneRule.Accumulating => ()
      case PaneRule.Discarding => window.buffer = agg.newBuffer()
      case PaneRule.Retracting => window.previous = result.copy()
    }
    window.revisions += 1
    window.dirty = false
    if (pane == Pane.OnTime) window.onTimeFired = true
    window.lastPaneMs = nowMs
  }

  /**
   * The key's windows that have not fired yet, and sessions that changed since they fired
   * (their next revision), as emitted when the key goes idle; the watermark is raised past
   * every window of the key (end plus allowed lateness), so that they are final.
   */
  def emitUnfired(keyValues: InternalRow, batch: KeyBatch, reported: Long): Seq[Row] = {
    val windows = batch.windows.values.toSeq.sortBy(_.start)
    val out = mutable.ArrayBuffer.empty[Row]
    windows.foreach { w =>
      Firing.pane(emission, due = true, w.onTimeFired, w.dirty).foreach(fire(keyValues, w, _, reported,
          batch.nowMs,
          out))
    }
    windows.foreach(w => batch.update.watermark.raise(w.end + closing.allowedLatenessMicros))
    out.toSeq
  }

  /** Grouping values as Spark's Aggregate lays them out: the key columns, then the window struct. */
  private def windowGroup(keyValues: InternalRow, start: Long, end: Long): InternalRow =
    new JoinedRow(keyValues, InternalRow(InternalRow(start, end)))
}
