package io.github.keyedwatermarks.emission

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
   * @param firedOnTime the window's on-time pane was emitted in an earlier batch (for a session:
   *                    the on-time pane of it or of a session merged into it)
   * @param changed     rows were merged into the window since its last pane
   * @param spaced      enough processing time passed since the window's last pane for an early
   *                    one (always, but with emit='every <duration>')
   *
   * An aligned window that fired on time is due (its end is fixed and the watermark only
   * rises); a session that fired on time may have grown past the watermark since: its changes
   * are then late panes, at once with early firings, once due again without (today's revisions).
   */
  def pane(emission: PaneRule, due: Boolean, firedOnTime: Boolean, changed: Boolean,
      spaced: Boolean = true): Option[Pane] =
    if (firedOnTime) { if (changed && (due || emission.early && spaced)) Some(Pane.Late) else None }
    else if (due) Some(Pane.OnTime)
    else if (emission.early && changed && spaced) Some(Pane.Early)
    else None
}
