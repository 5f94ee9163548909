package io.github.keyedwatermarks.contract

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper

import io.github.keyedwatermarks.shims.BuiltFor
import io.github.keyedwatermarks.spec.{IdleClock, KeyLateness}

/**
 * What the Python package and the JVM agree on, written once on the JVM side, here: the class
 * names Python starts, the report columns and kinds, the observed-metrics groups, the state
 * record `read_key_state` decodes, the Spark lines, the choices of `idle_clock` and the
 * adaptive-lateness defaults. The
 * engine reads these names from here. Python keeps a copy in `keyed_watermarks/_contract.py`
 * (the Spark Connect client has no JVM to ask); tests/test_contract.py compares it with [[json]].
 */
object Contract {
  val PythonApiClass = "io.github.keyedwatermarks.python.PythonAPI"

  /** The session extension that registers the partial aggregation's planner strategy. */
  val ExtensionsClass = "io.github.keyedwatermarks.KeyedWatermarksExtensions"
  val ConnectPluginClass = "io.github.keyedwatermarks.connect.KeyedWatermarksRelationPlugin"

  /** The report columns of `agg_with_report`, in order. */
  object Report {
    val Kind = "kw_kind"
    val LateRows = "kw_late_rows"
    val Watermark = "kw_watermark"
    val Regressions = "kw_regressions"
    val LateRow = "kw_late_row"
    val Reason = "kw_reason"
    val Columns: Seq[String] = Seq(Kind, LateRows, Watermark, Regressions, LateRow, Reason)
  }

  /** The values of `kw_kind`. */
  object Kinds {
    val Window = "window"
    val Late = "late"
    val LateRow = "late_row"
    val InvalidRow = "invalid_row"
    val Watermark = "watermark"
    val All: Seq[String] = Seq(Window, Late, LateRow, InvalidRow, Watermark)
  }

  /** The observed-metrics groups of a query's progress. */
  val InputMetrics = "keyed_watermarks_input"
  val OutputMetrics = "keyed_watermarks_output"
  /** The per-key joins' group (`keyed_watermarks_join.<name>` for a named join). */
  val JoinMetrics = "keyed_watermarks_join"
  /** Between a group's name and a named keyed stage's name: `keyed_watermarks_input.site`. */
  val StageSeparator = "."

  /** The per-key state variable and the fields of its record that `read_key_state` reads. */
  val KeyStateVariable = "key_state"
  val KeyStateFields: Seq[String] = Seq("watermark_us", "max_event_time_us", "open_window_count",
    "earliest_window_start_us", "late_rows", "regressions", "lateness_us", "last_arrival_ms", "quiet_since_ms")

  /** "Undefined" / "none" in the state record. */
  val StateUndefined: Long = Long.MinValue

  /** The choices of option `idle_clock` (docs/semantics.md, "Idle keys"), the default first. */
  val IdleClocks: Seq[String] = Seq(IdleClock.Arrival, IdleClock.ProcessingTime).map(_.name)

  /** Every value above by name (lists as JSON arrays), for the Python side's test. */
  def json: String = {
    val a = KeyLateness.Adaptive
    val values = Seq[(String, Any)](
      "python_api_class" -> PythonApiClass,
      "extensions_class" -> ExtensionsClass,
      "connect_plugin_class" -> ConnectPluginClass,
      "spark_lines" -> BuiltFor.SparkLines.asJava,
      "report_columns" -> Report.Columns.asJava,
      "report_kinds" -> Kinds.All.asJava,
      "input_metrics" -> InputMetrics,
      "output_metrics" -> OutputMetrics,
      "join_metrics" -> JoinMetrics,
      "stage_separator" -> StageSeparator,
      "key_state_variable" -> KeyStateVariable,
      "key_state_fields" -> KeyStateFields.asJava,
      "state_undefined" -> StateUndefined,
      "idle_clocks" -> IdleClocks.asJava,
      "adaptive_quantile" -> a.DefaultQuantile,
      "adaptive_min" -> a.DefaultMin,
      "adaptive_max" -> a.DefaultMax,
      "adaptive_relative_error" -> a.DefaultRelativeError)
    val map = new java.util.LinkedHashMap[String, Any]()
    values.foreach { case (k, v) => map.put(k, v) }
    new ObjectMapper().writeValueAsString(map)
  }
}
