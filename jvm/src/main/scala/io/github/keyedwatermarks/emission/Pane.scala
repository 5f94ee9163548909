package io.github.keyedwatermarks.emission

import org.apache.spark.unsafe.types.UTF8String

/**
 * Which firing of a window an output row is (docs/semantics.md, "Panes and accumulation"): its
 * `kw_pane` value. Early panes come before the key's watermark passes the window's end, the
 * one on-time pane when it does, late panes after it, within allowed lateness.
 */
private[keyedwatermarks] sealed abstract class Pane(val name: String) extends Serializable {
  private[emission] val utf8: UTF8String = UTF8String.fromString(name)
}

private[keyedwatermarks] object Pane {
  case object Early extends Pane("early")
  case object OnTime extends Pane("on_time")
  case object Late extends Pane("late")

  /** Result columns of a query that emits panes (emit other than 'final'). */
  val PaneColumn = "kw_pane"
  val PaneIndexColumn = "kw_pane_index"
  /** With accumulation='retracting': true on a row that withdraws an earlier pane. */
  val RetractionColumn = "kw_retraction"
}
