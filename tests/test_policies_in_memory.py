"""The watermark policies (docs/semantics.md, "Watermark policies" and "Idle keys"), in memory,
against the policy model (tests/policy_model.py), with at least 100 generated cases per policy:
per-key lateness (a column or a mapping), adaptive lateness, min of sources, the skew bound
(max_skew, with per-key or adaptive lateness), closing='global', closing='fleet' and idle_timeout
(on the wall clock and on the arrival clock).

Each case drives the operator over the in-memory state store and timers of Spark's TwsTester
(jvm/src/test/scala/.../testing/OperatorHarness.scala), micro-batch by micro-batch, with the
clocks Spark would give it: Spark's global watermark for the event-time policies (its rule:
the max event time of the valid rows of earlier batches, in ms, minus the lateness; one
trailing no-data batch when it moved in the last batch) and a processing time per batch, which
the idle tests draw (no-data batches in between, in which only timers act). The end-to-end
layer (tests/test_watermark_policies.py) runs the same model against streaming queries, with
4-6 cases per policy.

Checked per case: every emitted window (bounds and aggregates) in the batch the model emits
it, the late rows per (batch, key), and each attempted regression (batch, key, the key's count
and its watermark at the start of the batch).
"""

from __future__ import annotations

import pytest
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hypothesis import given, note
from hypothesis import strategies as st
from pyspark.sql import functions as F

from policy_model import Policy, PolicyResult, run_policy_model
from reference_model import spark_watermark_ms, valid_max_ms
from support import (
    ARRIVAL_SCHEMA, POLICY_SCHEMA, SECOND, arrival_clocks, arrival_rows, arrival_schedule, in_memory, policy_rows,
    policy_stream, run_in_memory,
)

# The fast layer: ./dev/test --quick runs the tests marked quick (pytest.ini).
pytestmark = pytest.mark.quick

WINDOW_S = 10
SKEWS_S = [0, 10, 30]  # small enough that keys fall behind the fleet and leave state
# max_skew as the query gets it: None is "unbounded", "default" leaves the option out (an hour).
DEFAULT = "default"


def options(lateness_s: int, skew_s=None, **policy) -> Dict[str, Any]:
    o = {"key": ["device"], "event_time": "ts", "lateness": f"{lateness_s} seconds", "report": True,
         "window": {"size": f"{WINDOW_S} seconds"}, **policy}
    if skew_s != DEFAULT and "idle_timeout" not in policy and policy.get("closing") != "global":
        o["max_skew"] = "unbounded" if skew_s is None else f"{skew_s} seconds"
    return o


def model_skew(skew_s) -> Optional[int]:
    from reference_model import DEFAULT_MAX_SKEW

    return DEFAULT_MAX_SKEW if skew_s == DEFAULT else None if skew_s is None else skew_s * SECOND


def aggs(numeric: bool) -> List:
    """numeric: count, sum, min and max (Spark's HashAggregateExec partials); else count and the
    sorted values (the on-heap partials)."""
    if numeric:
        return [F.count("*").alias("n"), F.sum("temp").alias("s"), F.min("temp").alias("lo"),
                F.max("temp").alias("hi")]
    return [F.count("*").alias("n"), F.sort_array(F.collect_list("temp")).alias("temps")]


def event_time_clocks(h, batches, lateness_s: int) -> List[Tuple[int, int]]:
    """Per batch, Spark's global watermark (ms, 0 while undefined) and a processing time, plus a
    trailing no-data batch when the watermark moved in the last batch (event-time policies)."""
    if h.timeModeName() != "EventTime":
        return [(0, 1000 * (n + 1)) for n in range(len(batches))]
    marks = [spark_watermark_ms(valid_max_ms(batches[:n]), lateness_s * SECOND) or 0
             for n in range(len(batches) + 1)]
    count = len(batches) + (1 if marks[-1] > marks[-2] else 0)
    return [(marks[n], 1000 * (n + 1)) for n in range(count)]


def check(out, model: PolicyResult, numeric: bool, batches_run: int) -> None:
    def values(vals):
        return (len(vals), float(sum(vals)), min(vals), max(vals)) if numeric else (len(vals), tuple(vals))

    got = Counter((n, r.device, r.start, r.end, (r.n, r.s, r.lo, r.hi) if numeric else (r.n, tuple(r.temps)))
                  for n, r in out if r.kw_kind == "window")
    want = Counter((b, k, s, e, values(vals)) for k, s, e, b, vals in model.emitted)
    assert got == want
    assert Counter({(n, r.device): r.kw_late_rows for n, r in out if r.kw_kind == "late"}) == Counter(model.late)
    held = {(n, r.device): (r.kw_regressions, r.wm) for n, r in out if r.kw_kind == "watermark"}
    assert held == model.held
    assert {r.kw_kind for _, r in out} <= {"window", "late", "watermark"}
    assert batches_run == model.batches


def run_case(harness, batches, lateness_s: int, policy: Policy, numeric: bool, opts: Dict[str, Any],
             columns: Optional[Dict] = None, clocks: Optional[Sequence[Tuple[int, int]]] = None):
    processing = None if clocks is None else [p for _, p in clocks]
    model = run_policy_model(batches, WINDOW_S * SECOND, policy, processing)
    note(f"options={opts} policy={policy} clocks={clocks} model={model}")
    h = harness(opts, aggs(numeric), columns, schema=POLICY_SCHEMA)
    clocks = clocks if clocks is not None else event_time_clocks(h, batches, lateness_s)
    check(run_in_memory(h, policy_rows(batches), "window", clocks), model, numeric, len(clocks))


@in_memory
@given(batches=policy_stream(per_key_lateness=True), lateness_s=st.sampled_from([0, 2, 10]),
       skew_s=st.sampled_from([None, DEFAULT]), numeric=st.booleans())
def test_key_lateness_column_in_memory(harness, batches, lateness_s, skew_s, numeric):
    """key_lateness=F.col(...): a key's lateness is the largest of its latest batch's rows
    (null: the default); both partial paths carry each partial's largest lateness."""
    policy = Policy(lateness_s * SECOND, column_lateness=True, max_skew=model_skew(skew_s))
    run_case(harness, batches, lateness_s, policy, numeric, options(lateness_s, skew_s),
             {"key_lateness": F.col("lat")})


@in_memory
@given(batches=policy_stream(), lateness_s=st.sampled_from([0, 5]), skew_s=st.sampled_from([None, DEFAULT]),
       numeric=st.booleans())
def test_key_lateness_mapping_in_memory(harness, batches, lateness_s, skew_s, numeric):
    """key_lateness={key: duration}: keys not in the mapping use the default lateness."""
    table = {k: lat for b in batches for k, _, _, lat, _ in b if lat is not None}
    batches = [[(k, t, v, table.get(k), s) for k, t, v, _, s in b] for b in batches]
    policy = Policy(lateness_s * SECOND, column_lateness=True, max_skew=model_skew(skew_s))
    mapping = {k: f"{v // SECOND} seconds" for k, v in table.items()}
    run_case(harness, batches, lateness_s, policy, numeric, options(lateness_s, skew_s, key_lateness=mapping))


@in_memory
@given(batches=policy_stream(max_rows=40), q=st.sampled_from([0.5, 0.9, 1.0]),
       bounds_s=st.sampled_from([(1, 12), (0, 30), (3, 4)]), skew_s=st.sampled_from([None, DEFAULT]),
       numeric=st.booleans())
def test_adaptive_lateness_in_memory(harness, batches, q, bounds_s, skew_s, numeric):
    """Per key, lateness = the nearest-rank quantile of how far rows trail the key's max,
    clamped (exact here: fewer rows per key than the sketch keeps exactly)."""
    lo, hi = bounds_s
    policy = Policy(5 * SECOND, adaptive=(q, lo * SECOND, hi * SECOND), max_skew=model_skew(skew_s))
    adaptive = {"quantile": q, "min": f"{lo} seconds", "max": f"{hi} seconds"}
    run_case(harness, batches, 5, policy, numeric, options(5, skew_s, adaptive_lateness=adaptive))


@in_memory
@given(batches=policy_stream(), expected=st.sampled_from([[], ["a", "b"], ["a"]]),
       lateness_s=st.sampled_from([0, 3]), skew_s=st.sampled_from([None, DEFAULT]), numeric=st.booleans())
def test_min_of_sources_in_memory(harness, batches, expected, lateness_s, skew_s, numeric):
    """source=...: the key's proposal is the min over its sources, undefined until every expected
    source (none listed: every source seen) has reported."""
    policy = Policy(lateness_s * SECOND, sources=expected, max_skew=model_skew(skew_s))
    opts = options(lateness_s, skew_s, **({"sources": expected} if expected else {}))
    run_case(harness, batches, lateness_s, policy, numeric, opts, {"source": F.col("src")})


@in_memory
@given(data=st.data(), skew_s=st.sampled_from(SKEWS_S), lateness_s=st.sampled_from([0, 5]),
       per_key=st.sampled_from(["fixed", "column", "adaptive"]), numeric=st.booleans())
def test_max_skew_in_memory(harness, data, skew_s, lateness_s, per_key, numeric):
    """max_skew: no key's watermark trails Spark's global watermark by more than the skew plus
    the key's own extra lateness; keys left without windows leave state and start again at the
    floor when they return; event-time timers close the windows of keys without rows."""
    batches = data.draw(policy_stream(per_key_lateness=per_key == "column", max_rows=40))
    columns = {"key_lateness": F.col("lat")} if per_key == "column" else None
    extra = {"adaptive_lateness": {"quantile": 0.9, "min": "0 seconds", "max": "20 seconds"}} \
        if per_key == "adaptive" else {}
    policy = Policy(lateness_s * SECOND, max_skew=skew_s * SECOND, column_lateness=per_key == "column",
                    adaptive=(0.9, 0, 20 * SECOND) if per_key == "adaptive" else None)
    run_case(harness, batches, lateness_s, policy, numeric, options(lateness_s, skew_s, **extra), columns)


@in_memory
@given(batches=policy_stream(), lateness_s=st.sampled_from([0, 5]), numeric=st.booleans())
def test_global_closing_in_memory(harness, batches, lateness_s, numeric):
    """closing='global': every key closes on Spark's global watermark, through its timers."""
    policy = Policy(lateness_s * SECOND, global_closing=True)
    run_case(harness, batches, lateness_s, policy, numeric, options(lateness_s, closing="global"))


@in_memory
@given(batches=policy_stream(max_rows=40), lateness_s=st.sampled_from([0, 5]),
       skew_s=st.sampled_from([0, 20, 60, DEFAULT]), numeric=st.booleans())
def test_fleet_closing_in_memory(harness, batches, lateness_s, skew_s, numeric):
    """closing='fleet': each key learns how far its own watermark trails Spark's global watermark
    and follows that watermark behind its skew (applied at the end of a batch and by timers, not
    at the start); a key without windows stays until max_skew's floor reaches its watermark."""
    policy = Policy(lateness_s * SECOND, max_skew=model_skew(skew_s), fleet=True)
    run_case(harness, batches, lateness_s, policy, numeric, options(lateness_s, skew_s, closing="fleet"))


IDLE_S = 10


@st.composite
def processing_schedule(draw, n_batches: int) -> Tuple[List[int], List[int]]:
    """Processing times (ms) for the data batches with no-data batches in between: returns the
    index of each data batch in the run and every batch's processing time. Gaps around the idle
    timeout, up to more than twice it, so keys go idle, get rows while idle and are forgotten."""
    gap_ms = st.sampled_from([1_000, 3_000, 6_000, 9_999, 10_000, 12_000, 25_000]).map(int)
    now, times, data_at = 1_000, [], []
    for _ in range(n_batches):
        for _ in range(draw(st.integers(0, 2))):  # no-data batches before the next data batch
            now += draw(gap_ms)
            times.append(now)
        now += draw(gap_ms)
        data_at.append(len(times))
        times.append(now)
    for _ in range(draw(st.integers(1, 3))):  # and after the last one
        now += draw(gap_ms)
        times.append(now)
    return data_at, times


@in_memory
@given(data=st.data(), lateness_s=st.sampled_from([0, 5]), numeric=st.booleans())
def test_idle_timeout_in_memory(harness, data, lateness_s, numeric):
    """idle_timeout on the wall clock (idle_clock='processing_time'): a key without rows for that
    long (processing time) has its open windows
    emitted and its watermark raised past them, so its rows for them are late; idle without
    windows for the timeout more (or without rows for twice it) it is forgotten and starts over."""
    rows = data.draw(policy_stream())
    data_at, times = data.draw(processing_schedule(len(rows)))
    batches: List[List[tuple]] = [[] for _ in times]
    for i, n in enumerate(data_at):
        batches[n] = rows[i]
    policy = Policy(lateness_s * SECOND, max_skew=None, idle_timeout=IDLE_S * SECOND)
    run_case(harness, batches, lateness_s, policy, numeric,
             options(lateness_s, idle_timeout=f"{IDLE_S} seconds", idle_clock="processing_time"),
             clocks=[(0, t) for t in times])


@in_memory
@given(data=st.data(), lateness_s=st.sampled_from([0, 5]), numeric=st.booleans())
def test_idle_timeout_on_arrival_clock_in_memory(harness, data, lateness_s, numeric):
    """idle_timeout on the arrival clock (the default, arrival_time=...): "now" is Spark's global
    watermark on the arrival time (the max arrival of the earlier batches), a key's last arrival
    the max arrival time of its rows (null: the clock as it stands); the same idle rule as on the
    wall clock, decided per batch by event-time timers."""
    rows = data.draw(policy_stream())
    batches, arrivals = data.draw(arrival_schedule(rows))
    opts = options(lateness_s, idle_timeout=f"{IDLE_S} seconds")
    h = harness(opts, aggs(numeric), {"arrival_time": F.col("arr")}, schema=ARRIVAL_SCHEMA)
    assert h.timeModeName() == "EventTime"  # the arrival clock: event-time timers, availableNow ends
    clocks = arrival_clocks(arrivals)
    policy = Policy(lateness_s * SECOND, max_skew=None, idle_timeout=IDLE_S * SECOND)
    model = run_policy_model(batches, WINDOW_S * SECOND, policy, arrival_ms=arrivals)
    note(f"options={opts} clocks={clocks} arrivals={arrivals} model={model}")
    rows_in = arrival_rows(batches, arrivals)
    check(run_in_memory(h, rows_in, "window", clocks), model, numeric, len(clocks))
