package io.github.keyedwatermarks.state

import scala.collection.mutable

import org.apache.spark.sql.catalyst.InternalRow

import io.github.keyedwatermarks.catalyst.CatalystAggregation
import io.github.keyedwatermarks.watermark.ClosedWindows
import io.github.keyedwatermarks.window.{AlignedWindows, SessionWindows, WindowAssigner}

/**
 * An open window of a key: its live buffer (with accumulation='discarding': the rows since
 * its last pane), the revisions (panes) it fired, its bounds, whether it changed since it last
 * fired (rows merged into it: a window that already fired fires again, as its next revision),
 * whether its on-time pane fired, and with accumulation='retracting' the result of its last
 * pane (null: none yet) and, for a session that merged sessions in this call, the results of
 * their last panes (its next pane withdraws them all).
 */
private[keyedwatermarks] final class OpenWindow(
    val start: Long, val end: Long, var buffer: InternalRow, var revisions: Int, var dirty: Boolean = false,
    var previous: InternalRow = null, var onTimeFired: Boolean = false) {
  var replacedPanes: List[InternalRow] = Nil
  /** The processing time (ms) of its last pane (emit='every <duration>' only). */
  var lastPaneMs: Long = OpenWindowRows.NoPane
}

/**
 * A key's open windows in and out of state: the rows of [[OpenWindowRows]] as [[OpenWindow]]s
 * by start (live buffers) when the key is loaded, and back when it is stored. The operator sees
 * windows, never a field's position (as Spark's state managers stand between an exec and its
 * store).
 */
private[keyedwatermarks] final class KeyWindows(
    rows: OpenWindowRows, agg: CatalystAggregation, windows: WindowAssigner) {

  /** A window that has not fired, with an empty buffer. */
  def newWindow(start: Long, end: Long): OpenWindow = new OpenWindow(start, end, agg.newBuffer(), 0)

  /**
   * The stored windows by start; `watermarkStored` the key's watermark as stored by the call
   * before, when every window it passed fired its on-time pane.
   */
  def load(stored: Iterator[InternalRow], watermarkStored: Long): mutable.LongMap[OpenWindow] = {
    val open = mutable.LongMap.empty[OpenWindow]
    stored.foreach { row =>
      val start = rows.start(row)
      val end = rows.end(row)
      val revisions = rows.revisions(row)
      // An aligned window's end is fixed: it fired on time if it fired and the stored watermark
      // passed it. A session's end moves: with early panes it says so itself; otherwise its
      // first firing is its on-time pane.
      val onTimeFired =
        if (rows.onTimeFlag) rows.onTimeFired(row)
        else windows match {
          case _: AlignedWindows => revisions > 0 && ClosedWindows.closedBy(end, watermarkStored)
          case _: SessionWindows => revisions > 0
        }
      val window = new OpenWindow(start, end, agg.fromStored(row), revisions, rows.dirty(row), rows.previous(row),
        onTimeFired)
      if (rows.paneTimes) window.lastPaneMs = rows.lastPaneMs(row)
      open.update(start, window)
    }
    open
  }

  /** The windows as rows to store (their buffers in stored form). */
  def rowsOf(open: Iterable[OpenWindow]): Iterator[InternalRow] =
    open.iterator.map(w =>
      rows.row(agg.toStored(w.buffer), w.revisions, w.start, w.end, w.dirty, w.previous, w.onTimeFired, w.lastPaneMs))
}
