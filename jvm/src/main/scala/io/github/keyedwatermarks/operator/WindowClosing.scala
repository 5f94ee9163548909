package io.github.keyedwatermarks.operator

import io.github.keyedwatermarks.state.OpenWindow
import io.github.keyedwatermarks.watermark.ClosedWindows
import io.github.keyedwatermarks.window.{AlignedWindows, SessionWindows, WindowAssigner}

/**
 * When a key's watermark closes its windows: a window is due (fires revision 0) when the key's
 * watermark passes its end, and expires (leaves state; its rows become late) when the watermark
 * passes end + allowed lateness. The firing, the timers and the lateness of partials all ask here.
 */
private[operator] final case class WindowClosing(windows: WindowAssigner, allowedLatenessMicros: Long) {
  def due(window: OpenWindow, wm: Long): Boolean = ClosedWindows.closedBy(window.end, wm)

  def expired(window: OpenWindow, wm: Long): Boolean = ClosedWindows.closedBy(window.end + allowedLatenessMicros, wm)

  /**
   * Whether a partial (rows of one window start) is late against the key's watermark at the
   * start of the batch `wm`: an aligned window is late once it expired; a session row once its
   * own start is (an on-time row can then never touch a session that already left state: that
   * needs end + A <= wm, and an on-time row's t > wm - A would have to be <= end).
   */
  def isLate(start: Long, wm: Long): Boolean = ClosedWindows.closedBy(lateFrom(start), wm)

  /** The watermark from which a partial starting at `start` is late. */
  def lateFrom(start: Long): Long = windows match {
    case w: AlignedWindows => w.windowEnd(start) + allowedLatenessMicros
    case _: SessionWindows => start + allowedLatenessMicros
  }

  /**
   * The watermark at which `window` next changes: fires (on time, or again) or expires; `wm` the
   * key's watermark now (a window whose early panes fired is still due at its end).
   */
  def threshold(window: OpenWindow, wm: Long): Long =
    if (window.revisions == 0 || window.dirty || !due(window, wm)) window.end else window.end + allowedLatenessMicros
}
