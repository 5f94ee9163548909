"""Issue 39: a query that was down, then catches up, emits the windows of the live run.

The scenario and the runs are in tests/outage_runner.py: 12 devices (8 sending every second,
4 uploading their last 6 seconds every 6 seconds), one file every 2 seconds of arrival time,
10-second windows, ``lateness="2 seconds"``; live (one file per micro-batch) against down after
file 5 and restarted from the checkpoint, catching up in many small micro-batches or in one.
The oracle is the live run itself, window by window (missing, extra, emitted twice, counts).

The wall clock (``idle_clock="processing_time"``) has no test here: it needs real time, and
on a loaded machine its "live" run is not live either (a micro-batch slower than the idle
timeout makes keys idle); ``python tests/outage_runner.py wall-clock`` runs the issue's
comparison by hand.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import keyed_watermarks as kw
from outage_runner import DEVICES, compare, fleet_files, run_files

REPO = Path(__file__).resolve().parents[1]
N_FILES = 12  # 24 s of arrival time: two closed 10-second windows per device, the third open
DOWN_AFTER = 5  # the query is down after file 5 (arrival second 12)


def assert_same(live, other) -> None:
    assert compare(live, other) == {"missing": [], "extra": [], "twice": [], "counts_differ": []}
    assert all(c == 1 for c in live.windows.values())


# d07 goes silent after second 15, u3 after its upload at 12: their last windows close on the
# skew bound or on idleness, not on their own rows.
SILENT = {"d07": 15, "u3": 11}


def assert_only_more_counted(live, big) -> None:
    """A larger catch-up batch: the same windows, each once; a count may only grow (rows late
    live counted with more grace)."""
    diff = compare(live, big)
    assert diff["missing"] == [] and diff["extra"] == [] and diff["twice"] == []
    for _, was, now in diff["counts_differ"]:
        assert now[0] > was[0]


@pytest.mark.parametrize("options", [
    pytest.param({"max_skew": "1 second"}, id="max_skew"),
    pytest.param({"closing": "fleet"}, id="closing_fleet"),
])
def test_skew_bound_same_windows_after_outage(spark, workdir, options):
    """The skew bound and fleet closing follow Spark's event-time watermark, which the
    checkpoint keeps and the rows move: a catch-up in micro-batches of the live size emits the
    live windows; one large catch-up batch may count rows that were late live, nothing else."""
    files = fleet_files(N_FILES, stop=SILENT)
    live = run_files(spark, workdir / "live", files, options)
    assert {d for d, _ in live.windows} == set(DEVICES) and ("d00", 10) in live.windows
    small = run_files(spark, workdir / "small", files, options, down_after=DOWN_AFTER, catch_up_files=1)
    assert_same(live, small)
    big = run_files(spark, workdir / "big", files, options, down_after=DOWN_AFTER, catch_up_files=None)
    assert_only_more_counted(live, big)


needs_arrival_clock = pytest.mark.skipif(
    "arrival_time" not in inspect.signature(kw.keyed_watermark).parameters,
    reason="the arrival clock (arrival_time, issue 39's engine part) is not in this build")

# The arrival clock: the file source's modification time of each row's file.
ARRIVAL = {"arrival_time": "arrival", "with_arrival_column": True, "idle_timeout": "8 seconds"}


@needs_arrival_clock
def test_arrival_clock_catch_up_emits_the_live_windows(spark, workdir):
    """Idleness on the arrival clock: down after file 5, the query restarts from its checkpoint
    and works through the backlog. One file per batch (the live size): the live windows,
    window by window. The whole backlog in one batch: the same windows (no key of this fleet
    is idle between two of its rows), counts only grow."""
    files = fleet_files(N_FILES, stop=SILENT)
    live = run_files(spark, workdir / "live", files, ARRIVAL)
    assert ("d07", 10) in live.windows and ("u3", 10) in live.windows  # closed by idleness
    assert ("d00", 20) not in live.windows  # the steady devices' last window stays open
    small = run_files(spark, workdir / "small", files, ARRIVAL, down_after=DOWN_AFTER, catch_up_files=1)
    assert_same(live, small)
    big = run_files(spark, workdir / "big", files, ARRIVAL, down_after=DOWN_AFTER, catch_up_files=None)
    assert_only_more_counted(live, big)


def _stream_execution(spark):
    """Spark's StreamExecution object (its package moved in Spark 4.1)."""
    jvm = spark._jvm
    for name in ("org.apache.spark.sql.execution.streaming.runtime.StreamExecution",
                 "org.apache.spark.sql.execution.streaming.StreamExecution"):
        try:
            cls = jvm.java.lang.Class.forName(name + "$")
            return cls.getField("MODULE$").get(None)
        except Exception:  # noqa: BLE001 - try the next package
            continue
    raise AssertionError("no StreamExecution in this Spark")


def test_foreach_batch_reports_a_stop_in_one_line_spark_recognises(spark):
    """A writer interrupted by ``query.stop()``: ``kw.foreach_batch`` re-raises it as one line
    that Spark's own check (``StreamExecution.isInterruptionException`` on the py4j exception
    Python's error becomes) reads as the stop; any other error is re-raised unchanged."""
    jvm = spark._jvm
    batch = spark.createDataFrame([("a", 3, "window", None, None)],
                                  "device STRING, n BIGINT, kw_kind STRING, kw_late_rows BIGINT, kw_watermark TIMESTAMP")

    def interrupted(df, batch_id):
        future = jvm.java.util.concurrent.CompletableFuture()
        future.completeExceptionally(jvm.java.lang.InterruptedException("sleep interrupted"))
        future.get()  # ExecutionException caused by the InterruptedException

    with pytest.raises(Exception) as info:
        kw.foreach_batch(results=interrupted)(batch, 4)
    text = str(info.value)
    assert "java.lang.InterruptedException" in text and "batch 4" in text and len(text) < 600
    assert info.value.__cause__ is None and info.value.__suppress_context__
    proxy_error = jvm.py4j.Py4JException(
        "An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n"
        f"  File \"x.py\", line 1, in write\n{type(info.value).__module__}.{type(info.value).__name__}: {text}\n")
    assert _stream_execution(spark).isInterruptionException(proxy_error, spark.sparkContext._jsc.sc())

    def failing(df, batch_id):
        jvm.java.lang.Integer.parseInt("not a number")

    with pytest.raises(Exception, match="not a number") as other:  # pyspark's own conversion
        kw.foreach_batch(results=failing)(batch, 5)
    assert "InterruptedException" not in str(other.value) and "stopped" not in str(other.value)


@pytest.mark.slow
def test_stop_mid_foreach_batch_has_no_regex_stack_overflow(tmp_path):
    """Issue 39's ``StackOverflowError`` of 1,024 ``java.util.regex.Pattern`` frames: a query
    stopped while its ``kw.foreach_batch`` writer runs a job (its own JVM, stderr captured)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "outage_runner.py"), "stop-in-foreach-batch", "--root", str(tmp_path)],
        capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "stopped; exception: None" in proc.stderr, proc.stderr[-4000:]
    assert "StackOverflowError" not in proc.stderr and "java.util.regex" not in proc.stderr, proc.stderr[-6000:]
