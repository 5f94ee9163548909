package io.github.keyedwatermarks.emission

import io.github.keyedwatermarks.spec.Emission

/**
 * Whether a window fires at the end of a batch (or timer), and as which pane
 * (docs/semantics.md, "Panes and accumulation"): the on-time pane always fires once, when the
 * key's watermark passes the window's end; after it a late pane fires per batch that changed
 * the window (within allowed lateness); before it, with early firings, an early pane fires per
 * batch that changed the window. With emit='final' this is exactly the firing rule of
 * revisions: the first firing when due, then one per change.
 */
private[keyedwatermarks] object Firing {
  /**
   * @param due         the key's watermark now passes the window's end
   * @param firedOnTime the window's on-time pane was emitted in an earlier batch
   * @param changed     rows were merged into the window since its last pane
   */
  def pane(emission: Emission, due: Boolean, firedOnTime: Boolean, changed: Boolean): Option[Pane] =
    if (!due) { if (emission.early && changed) Some(Pane.Early) else None }
    else if (!firedOnTime) Some(Pane.OnTime)
    else if (changed) Some(Pane.Late)
    else None
}
