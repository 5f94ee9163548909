package io.github.keyedwatermarks.planner

import org.apache.spark.sql.types.StructType

import io.github.keyedwatermarks.emission.PaneRule
import io.github.keyedwatermarks.spec.Emission
import io.github.keyedwatermarks.state.OpenWindowRows
import io.github.keyedwatermarks.window.{AlignedWindows, SessionWindows, WindowAssigner}

/** The engine's pane rule for an [[Emission]], and what it makes an open window's state row hold. */
private[keyedwatermarks] object PaneRules {

  def of(e: Emission): PaneRule = PaneRule(e.early, e.earlyPaneIntervalMs,
    e.accumulation match {
      case Emission.Accumulating => PaneRule.Accumulating
      case Emission.Discarding => PaneRule.Discarding
      case Emission.Retracting => PaneRule.Retracting
    })

  /**
   * The layout of an open window's row in state (state.OpenWindowRows) for `rule`: with
   * retracting, the result of its last pane (`resultSchema`); for sessions with early panes,
   * whether the on-time pane fired (a session's end moves, so the key's watermark cannot tell);
   * with emit='every <duration>', when its last pane fired. Only then, so that every other
   * query's rows stay as they were.
   */
  def windowRows(
      rule: PaneRule, windows: WindowAssigner, bufferSchema: StructType, resultSchema: StructType): OpenWindowRows = {
    val sessionsWithEarlyPanes = rule.early && (windows match {
      case _: SessionWindows => true
      case _: AlignedWindows => false
    })
    new OpenWindowRows(bufferSchema, if (rule.retracting) Some(resultSchema) else None,
      onTimeFlag = sessionsWithEarlyPanes, paneTimes = rule.earlyPaneIntervalMs > 0)
  }
}
