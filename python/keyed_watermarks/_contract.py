"""What the Python package and the JVM agree on: names, layouts and defaults.

The JVM side is ``io.github.keyedwatermarks.contract.Contract``. The Connect client has no JVM to
ask, so these are a copy, and ``tests/test_contract.py`` fails when the two differ. Import
nothing here: ``import keyed_watermarks`` must not need a JVM.
"""

from __future__ import annotations

#: The py4j entry point, the session extension, the Spark Connect plugin.
PYTHON_API_CLASS = "io.github.keyedwatermarks.python.PythonAPI"
EXTENSIONS_CLASS = "io.github.keyedwatermarks.KeyedWatermarksExtensions"
CONNECT_PLUGIN_CLASS = "io.github.keyedwatermarks.connect.KeyedWatermarksRelationPlugin"

#: The Spark minor lines a jar is built for (build.sbt's SparkLine list).
SPARK_LINES = ("4.0", "4.1", "4.2", "4.3")

#: The report columns of ``agg_with_report`` (in order) and the values of ``kw_kind``.
REPORT_COLUMNS = ("kw_kind", "kw_late_rows", "kw_watermark", "kw_regressions", "kw_late_row", "kw_reason")
REPORT_KINDS = ("window", "late", "late_row", "invalid_row", "watermark")

#: The observed-metrics groups in a query's progress.
INPUT_METRICS = "keyed_watermarks_input"
OUTPUT_METRICS = "keyed_watermarks_output"
#: The per-key joins' group (``keyed_watermarks_join.<name>`` for a named join).
JOIN_METRICS = "keyed_watermarks_join"
#: Between a group's name and a named keyed stage's name: ``keyed_watermarks_input.site``.
STAGE_SEPARATOR = "."

#: The per-key state variable and the fields of its record that ``read_key_state`` reads;
#: ``STATE_UNDEFINED`` (Long.MinValue) means undefined / none.
KEY_STATE_VARIABLE = "key_state"
KEY_STATE_FIELDS = (
    "watermark_us",
    "max_event_time_us",
    "open_window_count",
    "earliest_window_start_us",
    "late_rows",
    "regressions",
    "lateness_us",
    "last_arrival_ms",
    "quiet_since_ms",
)
STATE_UNDEFINED = -(2**63)

#: The choices of ``idle_clock`` (docs/semantics.md, "Idle keys"), the default first.
IDLE_CLOCKS = ("arrival", "processing_time")

#: The defaults of ``AdaptiveLateness``.
ADAPTIVE_QUANTILE = 0.99
ADAPTIVE_MIN = "0 seconds"
ADAPTIVE_MAX = "1 hour"
ADAPTIVE_RELATIVE_ERROR = 0.01


def as_dict() -> dict:
    """Every value above by name, as ``Contract.json`` gives the JVM's (for the test)."""
    return {
        "python_api_class": PYTHON_API_CLASS,
        "extensions_class": EXTENSIONS_CLASS,
        "connect_plugin_class": CONNECT_PLUGIN_CLASS,
        "spark_lines": list(SPARK_LINES),
        "report_columns": list(REPORT_COLUMNS),
        "report_kinds": list(REPORT_KINDS),
        "input_metrics": INPUT_METRICS,
        "output_metrics": OUTPUT_METRICS,
        "join_metrics": JOIN_METRICS,
        "stage_separator": STAGE_SEPARATOR,
        "key_state_variable": KEY_STATE_VARIABLE,
        "key_state_fields": list(KEY_STATE_FIELDS),
        "state_undefined": STATE_UNDEFINED,
        "idle_clocks": list(IDLE_CLOCKS),
        "adaptive_quantile": ADAPTIVE_QUANTILE,
        "adaptive_min": ADAPTIVE_MIN,
        "adaptive_max": ADAPTIVE_MAX,
        "adaptive_relative_error": ADAPTIVE_RELATIVE_ERROR,
    }
