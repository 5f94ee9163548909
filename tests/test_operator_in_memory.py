"""The operator's rules, in memory, against the reference model (tests/reference_model.py),
with hundreds of generated cases per rule.

Each case drives one KeyedWindowProcessor per key through Spark's TwsTester (an in-memory
state store), micro-batch by micro-batch: the partials of a batch are planned by the same
planner steps as in a streaming query, over a batch DataFrame (see
jvm/src/test/scala/.../testing/OperatorHarness.scala). No streaming query runs, so a case
takes a fraction of a second; the end-to-end layer (tests/test_reference_model.py) runs the
same model against real streaming queries with fewer cases.

Checked per case: every emitted window or session (bounds, aggregates, revision, the key's
watermark at the start of the emitting batch) in the batch the model emits it, and the late
rows per (batch, key) with the key's watermark.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from reference_model import run_model, run_session_model
from test_reference_model import LATENESS_S, SECOND, WINDOW_S, packed_streams, per_row_gap

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"
ROOT = Path(__file__).resolve().parent.parent
HARNESS = "io.github.keyedwatermarks.testing.OperatorHarness"

# Generated cases per rule (the end-to-end layer runs 5-8 each); KW_IN_MEMORY_CASES overrides.
CASES = int(os.environ.get("KW_IN_MEMORY_CASES", "100"))
in_memory = settings(
    max_examples=CASES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _test_classes() -> Path:
    """sbt's compiled Scala test classes (./dev/test compiles them before pytest runs)."""
    found = sorted(ROOT.glob("jvm/**/test-classes/io/github/keyedwatermarks/testing/OperatorHarness.class"),
                   key=lambda p: p.stat().st_mtime)
    if not found:
        pytest.fail("OperatorHarness is not compiled: run ./dev/sbt core/Test/compile (./dev/test does)")
    return found[-1].parents[4]


@pytest.fixture(scope="module")
def harness(spark):
    """A factory of harnesses, loaded from the Scala test classes by a class loader whose parent
    sees the session's jars (the keyed-watermarks jar and Spark)."""
    jvm = spark.sparkContext._jvm
    gateway = spark.sparkContext._gateway
    urls = gateway.new_array(jvm.java.net.URL, 1)
    urls[0] = jvm.java.io.File(str(_test_classes())).toURI().toURL()
    loader = jvm.java.net.URLClassLoader.newInstance(urls, jvm.Thread.currentThread().getContextClassLoader())
    constructor = loader.loadClass(HARNESS).getConstructors()[0]

    def make(options: Dict[str, Any], aggs: List, columns: Optional[Dict] = None):
        jcolumns = jvm.java.util.HashMap()
        for name, c in (columns or {}).items():
            jcolumns.put(name, c._jc)
        jaggs = jvm.java.util.ArrayList()
        for c in aggs:
            jaggs.add(c._jc)
        args = gateway.new_array(jvm.java.lang.Object, 5)
        for i, a in enumerate([spark._jsparkSession, SCHEMA, json.dumps(options), jcolumns, jaggs]):
            args[i] = a
        return constructor.newInstance(args)

    return make


class Out:
    """One output row: its columns as attributes (times in microseconds)."""

    def __init__(self, row: Dict[str, Any], window_col: str) -> None:
        self.__dict__.update(row)
        window = row.get(window_col) or {}
        self.start, self.end, self.wm = window.get("start"), window.get("end"), row["kw_watermark"]
        self.revision = row.get("revision") or 0


def run_batches(h, batches, window_col: str) -> List[tuple]:
    """Runs every batch through the harness; returns (batch, output row) pairs."""
    out = []
    for n, rows in enumerate(batches):
        # The operator's "key" rows only feed the per-batch metrics (the planner drops them).
        out += [(n, Out(r, window_col)) for r in json.loads(h.batch(json.dumps([list(r) for r in rows])))
                if r["kw_kind"] != "key"]
    return out


def late_per_batch_key(out) -> Counter:
    return Counter({(n, r.device): r.kw_late_rows for n, r in out if r.kw_kind == "late"})


def options(lateness_s: int, **windows) -> Dict[str, Any]:
    # No skew bound: it follows Spark's global watermark across micro-batches, which TwsTester
    # does not advance by itself (the end-to-end layer covers it: tests/test_reference_model.py).
    return {"key": ["device"], "event_time": "ts", "lateness": f"{lateness_s} seconds", "report": True,
            "max_skew": "unbounded", **windows}


def agg_of(values):
    present = [v for v in values if v is not None]
    return (len(values), float(sum(present)) if present else None,
            min(present) if present else None, max(present) if present else None)


def aggs() -> List:
    return [F.count("*").alias("n"), F.sum("temp").alias("s"), F.min("temp").alias("lo"), F.max("temp").alias("hi")]


def check_windows(out, model) -> None:
    got = Counter((n, r.device, r.start, r.end, r.n, r.s, r.lo, r.hi, r.wm, r.revision)
                  for n, r in out if r.kw_kind == "window")
    want = Counter((w.batch, w.key, w.start, w.end) + agg_of(w.values) + (w.watermark_at_start, w.revision)
                   for w in model.emitted)
    assert got == want
    assert late_per_batch_key(out) == Counter(model.late)
    got_wm = {(n, r.device): r.wm for n, r in out if r.kw_kind == "late"}
    assert got_wm == {k: model.late_watermark[k] for k in model.late}
    assert {r.kw_kind for _, r in out} <= {"window", "late"}


@in_memory
@given(batches=packed_streams(), lateness_s=st.sampled_from(LATENESS_S), window_s=st.sampled_from(WINDOW_S),
       allowed_s=st.sampled_from([0, 0, 0, 7]))
def test_tumbling_windows_in_memory(harness, batches, lateness_s, window_s, allowed_s):
    window = {"size": f"{window_s} seconds"}
    if allowed_s:
        window["allowed_lateness"] = f"{allowed_s} seconds"
    model = run_model(batches, lateness_s * SECOND, window_s * SECOND, allowed=allowed_s * SECOND, max_skew=None)
    note(f"lateness={lateness_s}s window={window_s}s allowed={allowed_s}s model={model}")
    h = harness(options(lateness_s, window=window), aggs())
    check_windows(run_batches(h, batches, "window"), model)


@in_memory
@given(batches=packed_streams(), lateness_s=st.sampled_from(LATENESS_S),
       window_slide=st.sampled_from([(10, 5), (10, 2), (6, 4), (5, 5)]))
def test_sliding_windows_in_memory(harness, batches, lateness_s, window_slide):
    window_s, slide_s = window_slide
    model = run_model(batches, lateness_s * SECOND, window_s * SECOND, slide_s * SECOND, max_skew=None)
    note(f"lateness={lateness_s}s window={window_s}s slide={slide_s}s model={model}")
    h = harness(options(lateness_s, window={"size": f"{window_s} seconds", "slide": f"{slide_s} seconds"}), aggs())
    check_windows(run_batches(h, batches, "window"), model)


@in_memory
@given(batches=packed_streams(), lateness_s=st.sampled_from([0, 5]), gap_s=st.sampled_from([3, 10, None]),
       allowed_s=st.sampled_from([0, 0, 6]))
def test_sessions_in_memory(harness, batches, lateness_s, gap_s, allowed_s):
    gap = per_row_gap if gap_s is None else gap_s * SECOND
    model = run_session_model(batches, lateness_s * SECOND, gap, allowed_s * SECOND)
    note(f"lateness={lateness_s}s gap={gap_s}s allowed={allowed_s}s model={model}")
    session: Dict[str, Any] = {} if gap_s is None else {"gap": f"{gap_s} seconds"}
    if allowed_s:
        session["allowed_lateness"] = f"{allowed_s} seconds"
    columns = None if gap_s is not None else {
        "gap": F.when(F.col("temp") > 20, "10 seconds").when(F.col("temp") >= 0, "3 seconds")
        .when(F.col("temp") < 0, "0 seconds")}
    h = harness(options(lateness_s, session=session),
                [F.count("*").alias("n"), F.sort_array(F.collect_list("temp")).alias("temps")], columns)
    out = run_batches(h, batches, "session_window")

    def values(vs):
        return tuple(sorted(vs, key=repr))

    got = Counter((n, r.device, r.start, r.end, values(r.temps), r.revision) for n, r in out if r.kw_kind == "window")
    # collect_list skips nulls, as Spark does.
    want = Counter((s.batch, s.key, s.start, s.end, values([v for v in s.values if v is not None]), s.revision)
                   for s in model.emitted)
    assert got == want
    assert late_per_batch_key(out) == Counter(model.late)
