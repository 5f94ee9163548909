"""Real-time mode's record-at-a-time rule (option ``real_time``; docs/semantics.md, "Real-time
mode"), in memory, against the reference model (tests/reference_model.py,
``run_model_per_row``): the stage planned with ``real_time=True`` (each row its own partials,
partials.RowPartials; one operator step per row) over the in-memory harness, batch by batch.
A micro-batch then closes a key's windows row by row, as real-time mode does: every emitted
window (bounds, aggregates, revision, the key's watermark before the row that closed it) in the
batch of that row, and the late rows per (batch, key, watermark before the row).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from pyspark.sql import functions as F

from reference_model import run_model, run_model_per_row, run_session_model_per_row
from support import (
    LATENESS_CHOICES_S, SECOND, WINDOW_CHOICES_S, aggs, check_emitted_sessions, check_emitted_windows, in_memory,
    options, packed_streams, run_in_memory, session_aggs, window_spec,
)

pytestmark = pytest.mark.quick


def late_rows(out) -> Counter:
    """(batch, key, watermark before the row) -> late rows, from the report rows."""
    late: Counter = Counter()
    for n, r in out:
        if r.kw_kind == "late":
            late[(n, r.device, r.wm)] += r.kw_late_rows
    return late


def real_time(lateness_s: int, **windows) -> Dict[str, Any]:
    o = options(lateness_s, **windows)
    del o["max_skew"]  # real_time: unbounded unless set (it refuses a bound)
    return {**o, "real_time": True}


@in_memory
@given(batches=packed_streams(), lateness_s=st.sampled_from(LATENESS_CHOICES_S),
       window=st.sampled_from([(s, None) for s in WINDOW_CHOICES_S] + [(10, 5), (6, 4)]),
       allowed_s=st.sampled_from([0, 0, 7]))
def test_windows_close_row_by_row(harness, batches, lateness_s, window, allowed_s):
    window_s, slide_s = window
    model = run_model_per_row(batches, lateness_s * SECOND, window_s * SECOND,
                              slide_s * SECOND if slide_s else None, allowed=allowed_s * SECOND)
    note(f"lateness={lateness_s}s window={window} allowed={allowed_s}s model={model}")
    spec = window_spec(window_s, slide_s, allowed_s)
    out = run_in_memory(harness(real_time(lateness_s, window=spec), aggs()), batches, "window")
    check_emitted_windows(out, model)
    assert late_rows(out) == Counter(model.late)
    assert {r.kw_kind for _, r in out} <= {"window", "late"}


@in_memory
@given(batches=packed_streams(), lateness_s=st.sampled_from([0, 5]), gap_s=st.sampled_from([3, 10]),
       allowed_s=st.sampled_from([0, 6]))
def test_sessions_close_row_by_row(harness, batches, lateness_s, gap_s, allowed_s):
    model = run_session_model_per_row(batches, lateness_s * SECOND, gap_s * SECOND, allowed_s * SECOND)
    note(f"lateness={lateness_s}s gap={gap_s}s allowed={allowed_s}s model={model}")
    session: Dict[str, Any] = {"gap": f"{gap_s} seconds"}
    if allowed_s:
        session["allowed_lateness"] = f"{allowed_s} seconds"
    out = run_in_memory(harness(real_time(lateness_s, session=session), session_aggs()), batches, "session_window")
    check_emitted_sessions(out, model)
    got_late = Counter()
    for (n, key, _), c in late_rows(out).items():
        got_late[(n, key)] += c
    want_late = Counter()
    for (n, key, _), c in model.late.items():
        want_late[(n, key)] += c
    assert got_late == want_late


def test_a_window_closes_on_the_row_that_passes_it(harness):
    """One key, one micro-batch: the row at 20 s passes the window [0, 10) (lateness 5 s), which is
    written by that row's step, with the key's watermark before it (3 s); a micro-batch would close
    it at the batch's end with the watermark at the batch's start (undefined). The row at 4 s after
    it is then late (against 15 s), which per micro-batch it is not."""
    t0 = 1_700_000_000 * SECOND
    rows = [["a", t0 + 8 * SECOND, 1.0], ["a", t0 + 20 * SECOND, 2.0], ["a", t0 + 4 * SECOND, 3.0]]
    out = run_in_memory(harness(real_time(5, window={"size": "10 seconds"}), aggs()), [rows], "window")
    per_row = [(r.kw_kind, r.wm) for _, r in out]
    # The windows start at multiples of 10 s since the epoch: t0 is one.
    assert per_row == [("window", t0 + 3 * SECOND), ("late", t0 + 15 * SECOND)]
    # The micro-batch rule on the same rows: no late row, the window closes with wm undefined.
    batch = run_model([[("a", t, v) for _, t, v in rows]], 5 * SECOND, 10 * SECOND, max_skew=None)
    assert [(w.watermark_at_start, w.values) for w in batch.emitted] == [(None, (1.0, 3.0))]
    assert not batch.late


# -- what real_time refuses, before any query runs ---------------------------------------------


@pytest.fixture(scope="module")
def rate_events(spark):
    return spark.readStream.format("rate").option("rowsPerSecond", 1).load().select(
        (F.col("value") % 2).cast("string").alias("device"), F.col("timestamp").alias("ts"),
        F.col("value").cast("double").alias("temp"))


@pytest.mark.parametrize("extra, named", [
    ({"max_skew": "1 hour"}, "max_skew"),
    ({"closing": "global"}, "closing='global'"),
    ({"clock": "processing_time"}, "clock='processing_time'"),
    ({"idle_timeout": "1 minute", "idle_clock": "processing_time"}, "idle_timeout"),
    ({"dedup": "temp"}, "dedup"),
    ({"metrics": "keys"}, "metrics='keys'"),
])
def test_real_time_refuses_what_needs_another_clock(rate_events, extra, named):
    import keyed_watermarks as kw
    from pyspark.errors import IllegalArgumentException

    with pytest.raises(IllegalArgumentException, match=f"{named}.*real_time=True"):
        kw.keyed_watermark(rate_events, key="device", event_time="ts", lateness="5 seconds", real_time=True,
                           **extra).window("10 seconds").agg(F.count("*").alias("n"))


def test_real_time_refuses_early_panes(rate_events):
    import keyed_watermarks as kw
    from pyspark.errors import IllegalArgumentException

    with pytest.raises(IllegalArgumentException, match="emit: 'every_batch' is not supported with real_time=True"):
        kw.keyed_watermark(rate_events, key="device", event_time="ts", lateness="5 seconds", real_time=True) \
            .window("10 seconds", emit="every_batch").agg(F.count("*").alias("n"))


def test_real_time_trigger_needs_the_real_time_plan(rate_events, tmp_path):
    """trigger(realTime=...) on a stage planned for micro-batches: refused when the query starts,
    naming the option (Spark's own refusal would name our partial aggregation's nodes)."""
    import keyed_watermarks as kw
    from pyspark.errors import IllegalArgumentException

    out = kw.keyed_watermark(rate_events, key="device", event_time="ts", lateness="5 seconds") \
        .window("10 seconds").agg(F.count("*").alias("n"))
    query = None
    with pytest.raises(IllegalArgumentException, match="set real_time=True"):
        query = (out.writeStream.format("console").outputMode("update")
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(realTime="10 seconds").start())
    if query is not None:
        query.stop()
