package io.github.keyedwatermarks.planner

import org.apache.spark.sql.{Column, DataFrame}
import org.apache.spark.sql.types.TimestampType

import io.github.keyedwatermarks.catalyst.SparkInternals
import io.github.keyedwatermarks.input.{DedupColumns, DurationColumn, InputPlan, SessionGap}
import io.github.keyedwatermarks.shims.SparkVersionCheck
import io.github.keyedwatermarks.spec.{ColumnGap, FixedGap, KeyLateness, OptionError, Sessions, Sliding, Tumbling}
import io.github.keyedwatermarks.spec.{Emission, KeyedQuerySpec, WatermarkSpec, WindowSpec}

/**
 * Checks a spec against the input (columns exist, types fit) and its options against each
 * other, so that bad input fails before any query starts. Every entry point (Scala API, py4j,
 * Spark Connect) calls these, eagerly, and the planner once more.
 */
private[keyedwatermarks] object SpecChecks {

  /**
   * real_time, against the whole query (its watermark options are checked by
   * WatermarkSpec.validateCombination): windows fire on time and with their revisions only.
   * An early pane per row would be a row of output per input row; emit='every <duration>'
   * follows processing time (docs/semantics.md, "Real-time mode").
   */
  def realTime(spec: KeyedQuerySpec): Unit = spec.emission.when match {
    case Emission.Final => ()
    case other => OptionError(s"emit: '${other.name}' is not supported with real_time=True (a window fires " +
        "when its key's watermark passes its end, on the row that passes it, and again within allowed_lateness; " +
        "docs/semantics.md, \"Real-time mode\")")
  }

  /** The watermark options against `events`; returns the validated input. */
  def watermark(w: WatermarkSpec, events: DataFrame, streaming: Boolean = true): InputPlan = {
    // Every path starts here: refuse a jar built for another Spark.
    SparkVersionCheck.requireBuiltForRunningSpark()
    if (w.lateness.micros < 0) OptionError(s"lateness: must not be negative, got '${w.lateness.text}'")
    val input = InputPlan.validate(events, w.keys, w.eventTime, streaming)
    w.keyLateness match {
      case KeyLateness.ByColumn(c) => DurationColumn.micros(events, c, "key_lateness")
      case KeyLateness.ByKey(_) if w.keys.size != 1 =>
        OptionError(
          s"key_lateness: a mapping needs a single key column, got ${w.keys.mkString(", ")}; use a lateness column")
      case KeyLateness.Fixed | KeyLateness.ByKey(_) | _: KeyLateness.Adaptive => ()
    }
    w.sources.foreach(s => events.select(s.column)) // an unknown column fails here (AnalysisException)
    DedupColumns.check(w.dedup, input)
    w.validateCombination()
    w.arrivalTime.foreach(arrivalTime(events, _))
    input
  }

  /**
   * arrival_time: a TIMESTAMP column of `events` (an unknown column fails with Spark's
   * AnalysisException), and a stage that may define Spark's global watermark on it: none is
   * defined upstream (one per query) and no stateful operator precedes it.
   */
  private def arrivalTime(events: DataFrame, column: Column): Unit = {
    val field = events.select(column).schema.head
    if (field.dataType != TimestampType) OptionError(
      s"arrival_time: column '${field.name}' must be of type TIMESTAMP (each row's arrival time), but it is " +
        s"${field.dataType.sql}; cast it first, e.g. F.col('${field.name}').cast('timestamp')")
    val upstream = SparkInternals.analyzedPlan(events)
    if (KeyedStages.watermarkUpstream(upstream) || KeyedStages.statefulUpstream(upstream)) OptionError(
      "arrival_time: the arrival clock is Spark's global watermark defined on the arrival time, but this stage's " +
        "input already has a watermark or a stateful operator upstream (Spark keeps one global watermark per " +
        "query and refuses one after a stateful operator); on this stage use idle_clock='processing_time' " +
        "(not outage-safe) or max_skew instead of the idle options")
  }

  /** The window options (and a gap column's type against `events`). */
  def windows(windows: WindowSpec, events: DataFrame): Unit = {
    windows match {
      case Sessions(ColumnGap(c), _) => SessionGap.checkType(events, c)
      case _: Tumbling | _: Sliding | Sessions(FixedGap(_), _) => ()
    }
    windows.validate()
  }
}
