package io.github.keyedwatermarks.spec

import org.apache.spark.sql.Column

/**
 * The windows of a query, as the user chose them. Aligned windows (tumbling, sliding) have
 * fixed bounds per event time; session windows merge per key (Flink's `MergingWindowAssigner`
 * draws the same line). Matches over it are exhaustive: a new kind is a compiler warning (a
 * match that is not exhaustive) at every place that must handle it.
 */
sealed trait WindowSpec {
  /** A window stays in state this much longer after it first fires (late firings, `revision`). */
  def allowedLateness: Option[DurationOption]

  /** Checks the sizes before any query starts (a gap column's type: planner.SpecChecks). */
  def validate(): Unit
}

object WindowSpec {
  /**
   * The most windows one row may fall in (size / slide). Each row is copied into each of its
   * windows, and the driver plans one expression per copy: "10 seconds" sliding every
   * microsecond would be ten million.
   */
  val MaxWindowsPerRow: Long = 1000L

  private[spec] def checkAllowed(allowed: Option[DurationOption]): Unit = allowed.foreach { a =>
    if (a.micros < 0) OptionError(s"allowed_lateness: must not be negative, got '${a.text}'")
  }

  private[spec] def checkSize(size: DurationOption): Unit =
    if (size.micros <= 0) OptionError(s"window: size must be positive, got '${size.text}'")
}

/** Aligned windows: bounds of Spark's `window(ts, size[, slide])`. */
sealed trait AlignedWindows extends WindowSpec {
  def size: DurationOption
}

final case class Tumbling(size: DurationOption, allowedLateness: Option[DurationOption] = None) extends AlignedWindows {
  def validate(): Unit = {
    WindowSpec.checkSize(size)
    WindowSpec.checkAllowed(allowedLateness)
  }
}

final case class Sliding(size: DurationOption, slide: DurationOption, allowedLateness: Option[DurationOption] = None)
    extends AlignedWindows {
  def validate(): Unit = {
    WindowSpec.checkSize(size)
    if (slide.micros <= 0 || slide.micros > size.micros) OptionError(
      s"slide: must be positive and at most the window size '${size.text}', got '${slide.text}'")
    val perRow = (size.micros + slide.micros - 1) / slide.micros
    if (perRow > WindowSpec.MaxWindowsPerRow) OptionError(
      s"slide: '${slide.text}' puts each row in $perRow windows of '${size.text}'; at most " +
        s"${WindowSpec.MaxWindowsPerRow} are supported (use a larger slide)")
    WindowSpec.checkAllowed(allowedLateness)
  }
}

/** Session windows per key: a fixed gap or a per-row gap column (as `session_window` allows). */
final case class Sessions(gap: SessionGapSpec, allowedLateness: Option[DurationOption] = None) extends WindowSpec {
  def validate(): Unit = {
    gap match {
      case FixedGap(g) => if (g.micros <= 0) OptionError(s"gap: must be positive, got '${g.text}'")
      case ColumnGap(_) => () // its type is checked against the input (planner.SpecChecks)
    }
    WindowSpec.checkAllowed(allowedLateness)
  }
}

sealed trait SessionGapSpec
final case class FixedGap(gap: DurationOption) extends SessionGapSpec {
  /**
   * `session_window` adds days as calendar days in the session time zone (23 or 25 hours across
   * a daylight-saving change): such a gap is computed per row, as Spark does.
   */
  def hasCalendarDays: Boolean = DurationOption.days(gap.text) != 0
}
final case class ColumnGap(gap: Column) extends SessionGapSpec

/** The aggregation step: Spark aggregate columns, with or without report rows. */
final case class AggregationSpec(aggregates: Seq[Column], withReport: Boolean = false, keepLateRows: Boolean = false) {
  if (aggregates.isEmpty) OptionError("agg: at least one aggregate column is required")
  if (keepLateRows && !withReport)
    OptionError("keep_late_rows: needs agg_with_report (the report carries the rows)")
}

/**
 * A whole keyed query: what Python and Spark Connect send, what the planner plans. `emission`:
 * when windows fire and what repeated panes hold (default: once, when final).
 */
final case class KeyedQuerySpec(watermark: WatermarkSpec, windows: WindowSpec, aggregation: AggregationSpec,
    emission: Emission = Emission.Default)
