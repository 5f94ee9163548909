"""Bad input fails fast with a named error, before any streaming query starts.

Every check here only builds the query (no writeStream): `keyed_watermark(...)`, `.window(...)`
and `.agg(...)` validate eagerly, in Python (types) or in the JVM (columns, durations,
aggregates). After each failure no query may be running.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import textwrap

import pytest
from pyspark.errors import (
    AnalysisException,
    IllegalArgumentException,
    PySparkTypeError,
)
from pyspark.sql import functions as F

import keyed_watermarks as kw

# Every Spark line (dev/test runs these on 4.0, 4.1 and 4.2 too).
pytestmark = pytest.mark.all_versions

SCHEMA = "device STRING, site STRING, ts TIMESTAMP, temp DOUBLE, ts_str STRING"


@pytest.fixture
def events(spark, tmp_path):
    """A streaming DataFrame over an empty directory: enough to validate, never started."""
    d = tmp_path / "input"
    d.mkdir()
    df = spark.readStream.schema(SCHEMA).parquet(str(d))
    assert df.isStreaming
    yield df
    # Nothing above may have started a query.
    assert spark.streams.active == []


def _keyed(events, **overrides):
    args = dict(key="device", event_time="ts", lateness="5 seconds")
    args.update(overrides)
    return kw.keyed_watermark(events, **args)


def _window(events):
    return _keyed(events).window("10 seconds")


# ---- columns ---------------------------------------------------------------------------


def test_unknown_key_column(events):
    with pytest.raises(AnalysisException, match="UNRESOLVED_COLUMN") as e:
        _keyed(events, key="no_such_device")
    assert "no_such_device" in str(e.value)


def test_unknown_key_column_in_composite_key(events):
    with pytest.raises(AnalysisException) as e:
        _keyed(events, key=["site", "no_such_site"])
    assert "no_such_site" in str(e.value)


def test_unknown_event_time_column(events):
    with pytest.raises(AnalysisException, match="UNRESOLVED_COLUMN") as e:
        _keyed(events, event_time="no_such_ts")
    assert "no_such_ts" in str(e.value)


def test_event_time_of_type_string(events):
    with pytest.raises(IllegalArgumentException) as e:
        _keyed(events, event_time="ts_str")
    msg = str(e.value)
    assert "event_time" in msg and "ts_str" in msg and "TIMESTAMP" in msg and "STRING" in msg


def test_batch_dataframe_is_rejected(spark):
    batch = spark.createDataFrame([], SCHEMA)
    with pytest.raises(IllegalArgumentException, match="streaming DataFrame"):
        _keyed(batch)


def test_event_time_also_a_key(events):
    with pytest.raises(IllegalArgumentException, match="event_time: column 'ts' is also a key"):
        _keyed(events, key=["device", "ts"])


def test_duplicate_key_columns(events):
    with pytest.raises(IllegalArgumentException, match="key: duplicate columns"):
        _keyed(events, key=["device", "device"])


# ---- durations -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["5 parsecs", "soon", "five seconds"])
def test_bad_lateness_string(events, bad):
    with pytest.raises(IllegalArgumentException) as e:
        _keyed(events, lateness=bad)
    msg = str(e.value)
    assert msg.startswith("lateness:") and f"'{bad}' is not a valid duration" in msg


@pytest.mark.parametrize("bad", ["ten seconds", "10 fortnights"])
def test_bad_window_string(events, bad):
    with pytest.raises(IllegalArgumentException) as e:
        _keyed(events).window(bad)
    msg = str(e.value)
    assert msg.startswith("window:") and f"'{bad}' is not a valid duration" in msg


def test_empty_lateness_string(events):
    with pytest.raises(IllegalArgumentException, match="^lateness: a duration is required"):
        _keyed(events, lateness="")


def test_negative_lateness_string(events):
    # Parsed in the JVM, rejected there: Java IllegalArgumentException, surfaced by PySpark as
    # pyspark.errors.IllegalArgumentException.
    with pytest.raises(IllegalArgumentException, match="^lateness: must not be negative, got '-5 seconds'"):
        _keyed(events, lateness="-5 seconds")


def test_negative_lateness_timedelta(events):
    # A timedelta is only converted in Python; the JVM applies the same rule as to a string.
    with pytest.raises(IllegalArgumentException, match="^lateness: must not be negative, got '-5000000 microseconds'"):
        _keyed(events, lateness=dt.timedelta(seconds=-5))


def test_zero_lateness_is_fine(events):
    _keyed(events, lateness="0 seconds").window("10 seconds").agg(F.count("*"))
    _keyed(events, lateness=dt.timedelta(0)).window("10 seconds").agg(F.count("*"))


@pytest.mark.parametrize("option", ["lateness", "window"])
@pytest.mark.parametrize("text", ["1 month", "1 year", "1 month 2 days"])
def test_month_based_durations(events, option, text):
    with pytest.raises(IllegalArgumentException) as e:
        if option == "lateness":
            _keyed(events, lateness=text)
        else:
            _keyed(events).window(text)
    msg = str(e.value)
    assert msg.startswith(f"{option}: '{text}'") and "months or years" in msg


@pytest.mark.parametrize("size", ["0 seconds", "-10 seconds", dt.timedelta(0)])
def test_zero_or_negative_window(events, size):
    with pytest.raises(IllegalArgumentException, match="^window: size must be positive"):
        _keyed(events).window(size)


def test_negative_window_timedelta(events):
    with pytest.raises(IllegalArgumentException, match="^window: size must be positive"):
        _keyed(events).window(dt.timedelta(seconds=-10))


@pytest.mark.parametrize("bad", ["0 seconds", "-1 seconds"])
def test_non_positive_idle_timeout(events, bad):
    with pytest.raises(IllegalArgumentException, match=f"^idle_timeout: must be positive, got '{bad}'"):
        _keyed(events, idle_timeout=bad)


@pytest.mark.parametrize("options, error, message", [
    # The idle options follow the stream's arrival clock by default: they need arrival_time.
    ({"idle_timeout": "1 minute"}, IllegalArgumentException,
     "^idle_timeout: idleness is measured on the stream's arrival clock .*arrival_time.*'timestamp'.*"
     "_metadata.file_modification_time.*idle_clock='processing_time'.*not outage-safe"),
    ({"idle_timeout": "1 minute", "advance_when_idle": True}, IllegalArgumentException, "^idle_timeout: .*arrival_time"),
    ({"source": "site", "source_idle_timeout": "1 minute"}, IllegalArgumentException,
     "^source_idle_timeout: idleness is measured on the stream's arrival clock .*arrival_time"),
    ({"idle_timeout": "1 minute", "arrival_time": "nope"}, AnalysisException, "nope"),
    ({"idle_timeout": "1 minute", "arrival_time": "temp"}, IllegalArgumentException,
     "^arrival_time: column 'temp' must be of type TIMESTAMP .* but it is DOUBLE"),
    (lambda: {"idle_timeout": "1 minute", "arrival_time": F.col("ts_str")}, IllegalArgumentException,
     "^arrival_time: column 'ts_str' must be of type TIMESTAMP"),
    ({"idle_timeout": "1 minute", "idle_clock": "processing_time", "arrival_time": "ts"}, IllegalArgumentException,
     "^arrival_time: not read with idle_clock='processing_time'"),
    ({"idle_clock": "wall"}, IllegalArgumentException, "^idle_clock: expected 'arrival' or 'processing_time', got 'wall'"),
    ({"clock": "processing_time", "idle_clock": "arrival"}, IllegalArgumentException,
     "^idle_clock='arrival' cannot be combined with clock='processing_time'"),
    # One query, one global watermark: the arrival clock's, or the event-time one of max_skew/closing.
    ({"idle_timeout": "1 minute", "arrival_time": "ts", "max_skew": "1 minute"}, IllegalArgumentException,
     "^max_skew follows Spark's global event-time watermark .*idle_timeout on the arrival clock"),
    ({"idle_timeout": "1 minute", "max_skew": "1 minute"}, IllegalArgumentException, "^max_skew follows"),
    ({"idle_timeout": "1 minute", "arrival_time": "ts", "closing": "fleet"}, IllegalArgumentException,
     "^closing='fleet' follows Spark's global event-time watermark .*arrival clock"),
    ({"arrival_time": 5}, PySparkTypeError, "^arrival_time: expected a column name or a Column"),
])
def test_bad_arrival_clock_options(events, options, error, message):
    options = options() if callable(options) else options
    with pytest.raises(error, match=message):
        _keyed(events, **options)


def test_arrival_time_without_idle_options_is_refused_before_start(events):
    with pytest.raises(IllegalArgumentException, match="^arrival_time: only the idle options read it"):
        _keyed(events, arrival_time="ts").window("10 seconds").agg(F.count("*").alias("n"))


def test_arrival_clock_after_an_upstream_watermark_is_refused(events):
    with pytest.raises(IllegalArgumentException, match="^arrival_time: the arrival clock is Spark's global watermark"):
        _keyed(events.withWatermark("ts", "1 minute"), idle_timeout="1 minute", arrival_time="ts")


def test_arrival_clock_and_wall_clock_accepted(events):
    arrival = _keyed(events, idle_timeout="1 minute", arrival_time="ts", advance_when_idle=True)
    wall = _keyed(events, idle_timeout="1 minute", idle_clock="processing_time")
    for k in (arrival, wall):
        assert k.window("10 seconds").agg(F.count("*").alias("n")).isStreaming


def test_duration_of_wrong_type(events):
    with pytest.raises(PySparkTypeError, match="^lateness: expected a duration string"):
        _keyed(events, lateness=5)
    with pytest.raises(IllegalArgumentException, match="^lateness: a duration is required"):
        _keyed(events, lateness=None)
    with pytest.raises(PySparkTypeError, match="^window: expected a duration string"):
        _keyed(events).window(10)


# ---- aggregates ------------------------------------------------------------------------


def test_non_aggregate_expression(events):
    with pytest.raises(AnalysisException, match="MISSING_AGGREGATION") as e:
        _window(events).agg(F.col("temp"))
    assert '"temp"' in str(e.value)


def test_non_aggregate_expression_among_aggregates(events):
    with pytest.raises(AnalysisException, match="MISSING_AGGREGATION") as e:
        _window(events).agg_with_report(F.count("*"), F.col("temp") + 1)
    assert '"temp"' in str(e.value)


def test_unknown_column_in_aggregate(events):
    with pytest.raises(AnalysisException, match="UNRESOLVED_COLUMN") as e:
        _window(events).agg(F.sum("no_such_column"))
    assert "no_such_column" in str(e.value)


def test_distinct_aggregate_is_rejected(events):
    with pytest.raises(IllegalArgumentException, match="^agg: DISTINCT aggregates are not supported"):
        _window(events).agg(F.count_distinct("temp"))


@pytest.mark.parametrize("report", [False, True])
def test_non_column_in_agg(events, report):
    w = _window(events)
    agg = w.agg_with_report if report else w.agg
    with pytest.raises(PySparkTypeError, match="^agg: expected pyspark Columns.*got str"):
        agg(F.count("*"), "temp")


@pytest.mark.parametrize("report", [False, True])
def test_empty_agg(events, report):
    w = _window(events)
    agg = w.agg_with_report if report else w.agg
    with pytest.raises(IllegalArgumentException, match="^agg: at least one aggregate column is required"):
        agg()


# ---- key / event_time argument types ---------------------------------------------------


@pytest.mark.parametrize("key", [None, [], ["device", 1], ["device", ""], ("site", None)])
def test_key_not_str(events, key):
    with pytest.raises(PySparkTypeError, match="^key: expected a column name or a non-empty list"):
        _keyed(events, key=key)


def test_key_scalar_not_str(events):
    with pytest.raises(PySparkTypeError, match="^key: expected a column name"):
        _keyed(events, key=1)


def test_event_time_not_str(events):
    with pytest.raises(PySparkTypeError, match="^event_time: expected a column name, got 3"):
        _keyed(events, event_time=3)


# ---- session without the jar -----------------------------------------------------------

_NO_JAR_SCRIPT = textwrap.dedent(
    """
    from pyspark.sql import SparkSession, functions as F
    import keyed_watermarks as kw

    spark = (SparkSession.builder.master("local[1]")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    events = spark.readStream.format("rate").load().withColumn("device", F.lit("a"))
    try:
        kw.keyed_watermark(events, key="device", event_time="timestamp", lateness="5 seconds")
    finally:
        assert spark.streams.active == []
        spark.stop()
    """
)


@pytest.mark.slow
def test_session_without_jar_raises_clear_error(tmp_path):
    # A second SparkContext cannot be created in this process: use a fresh interpreter.
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR")}
    proc = subprocess.run(
        [sys.executable, "-c", _NO_JAR_SCRIPT],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode != 0, proc.stdout + proc.stderr
    err = proc.stderr
    assert "PySparkRuntimeError" in err, err[-3000:]
    assert "the keyed-watermarks jar is not on this SparkSession's classpath" in err, err[-3000:]
    assert "keyed_watermarks.configure(SparkSession.builder)" in err
    assert "--jars" in err and ".jar" in err


_NO_EXTENSION_SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession, functions as F
    import keyed_watermarks as kw
    from keyed_watermarks._jvm import ROCKSDB_PROVIDER

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.jars", sys.argv[1])
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    events = spark.readStream.format("rate").load().withColumn("device", F.lit("a"))
    try:
        kw.keyed_watermark(events, key="device", event_time="timestamp", lateness="5 seconds").window(
            "10 seconds").agg(F.count(F.lit(1)).alias("n"))
    finally:
        assert spark.streams.active == []
        spark.stop()
    """
)


@pytest.mark.slow
def test_session_without_extension_is_refused(tmp_path):
    # The jar without spark.sql.extensions: the checks of the session extension (stateful
    # operators after a keyed stage, outputMode, restarts) could not run, so nothing is planned.
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR")}
    proc = subprocess.run([sys.executable, "-c", _NO_EXTENSION_SCRIPT, kw.jar_path()], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0, proc.stdout + proc.stderr
    err = proc.stderr
    assert "IllegalArgumentException" in err, err[-3000:]
    assert ("spark.sql.extensions: this SparkSession was built without "
            "io.github.keyedwatermarks.KeyedWatermarksExtensions") in err, err[-3000:]
    assert "keyed_watermarks.configure(SparkSession.builder)" in err


def test_slide_larger_than_window(events):
    with pytest.raises(IllegalArgumentException, match="slide: must be positive and at most the window size"):
        _keyed(events).window("10 seconds", slide="11 seconds")


def test_bad_slide_duration(events):
    with pytest.raises(IllegalArgumentException, match="slide: 'often' is not a valid duration"):
        _keyed(events).window("10 seconds", slide="often")


# ---- result column names ---------------------------------------------------------------


@pytest.mark.parametrize(
    "key, aggs, column",
    [
        ("device", lambda: [F.count("*").alias("n"), F.sum("temp").alias("n")], "n"),
        ("device", lambda: [F.count("*").alias("device")], "device"),
        ("device", lambda: [F.count("*").alias("WINDOW")], "WINDOW"),
        ("device", lambda: [F.count("*").alias("kw_kind")], "kw_kind"),
    ],
)
def test_duplicate_result_names_are_refused_before_start(events, key, aggs, column):
    with pytest.raises(IllegalArgumentException, match=f"^agg: the result would have two columns named '{column}'"):
        _keyed(events, key=key).window("10 seconds").agg(*aggs())


def test_key_named_window_is_refused(spark, tmp_path):
    d = tmp_path / "input"
    d.mkdir()
    events = spark.readStream.schema("window STRING, ts TIMESTAMP").parquet(str(d))
    with pytest.raises(IllegalArgumentException, match="two columns named 'window'.*key column 'window'"):
        kw.keyed_watermark(events, key="window", event_time="ts", lateness="1 second").window("10 seconds").agg(
            F.count("*")
        )


def test_revision_alias_with_allowed_lateness_is_refused(events):
    with pytest.raises(IllegalArgumentException, match="two columns named 'revision'"):
        _keyed(events).window("10 seconds", allowed_lateness="1 minute").agg(F.count("*").alias("revision"))


def test_too_many_windows_per_row_is_refused_while_defining(events):
    # 10 s sliding every microsecond would put each row in ten million windows.
    with pytest.raises(IllegalArgumentException, match="^slide: '1 microsecond' puts each row in 10000000 windows"):
        _keyed(events).window("10 seconds", slide="1 microsecond")
    _keyed(events).window("10 seconds", slide="10 milliseconds")  # 1,000 windows: the bound itself


def test_key_lateness_and_adaptive_lateness_are_refused_together(events):
    with pytest.raises(IllegalArgumentException, match="^key_lateness and adaptive_lateness: choose one"):
        _keyed(events, key_lateness={"a": "1 minute"}, adaptive_lateness=kw.AdaptiveLateness())


def test_adaptive_lateness_options_are_named_as_in_python(events):
    with pytest.raises(IllegalArgumentException, match="^adaptive_lateness.min '2 hours' is above adaptive_lateness.max"):
        _keyed(events, adaptive_lateness=kw.AdaptiveLateness(min="2 hours", max="1 hour"))
