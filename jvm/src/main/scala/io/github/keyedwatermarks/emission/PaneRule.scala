package io.github.keyedwatermarks.emission

/**
 * The engine's form of the `emit` and `accumulation` options (docs/semantics.md, "Panes and
 * accumulation"), translated from spec.Emission by planner.PaneRules as the watermark options
 * are by planner.WatermarkPolicies: what executors get instead of the user's spec. Whether a
 * window fires early panes, at least how far apart in processing time (0: at every change), and
 * what a repeated pane holds.
 */
private[keyedwatermarks] final case class PaneRule(
    early: Boolean, earlyPaneIntervalMs: Long, accumulation: PaneRule.Accumulation) {

  /** Whether output rows carry pane columns (`kw_pane`, `kw_pane_index`): with early panes. */
  def withPaneColumns: Boolean = early

  def retracting: Boolean = accumulation == PaneRule.Retracting
}

private[keyedwatermarks] object PaneRule {
  /** What each repeated pane of a window holds. */
  sealed trait Accumulation extends Serializable
  /** The whole window so far. */
  case object Accumulating extends Accumulation
  /** Only the rows since the window's previous pane. */
  case object Discarding extends Accumulation
  /** The whole window, preceded by a retraction of the window's previous pane. */
  case object Retracting extends Accumulation

  /** emit='final': one on-time pane, then late revisions, each the whole window. */
  val Final: PaneRule = PaneRule(early = false, earlyPaneIntervalMs = 0L, Accumulating)
}
