"""End-to-end tests of the operator against the reference model (tests/reference_model.py).

Hypothesis generates multi-key streams (out-of-order event times, late rows, null keys, null
event times, null values), random batch splits, lateness and window sizes. Each example is
replayed through Spark's file source (one file per micro-batch, Trigger.AvailableNow) and
the output is compared with the model: emitted windows and their aggregates, per-key late
counts, invalid-row counts, the accounting identity, and the micro-batch of each emission
(through the query's observed metrics, one progress entry per micro-batch).

A Spark query takes seconds here, so each example packs several independent streams (each
with its own key prefix and batch split: keys never interact) into one query.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Dict, Optional

import pytest
from hypothesis import example, given, note
from hypothesis import strategies as st
from pyspark.sql import functions as F

import keyed_watermarks as kw
from reference_model import ModelResult, run_model, run_session_model
from support import (
    BASE, LATENESS_CHOICES_S, SECOND, WINDOW_CHOICES_S, Replay, assert_late_per_key, executed_plan, packed_streams,
    per_row_gap, run_to_end, spark_examples, to_spark_rows,
)

DEFAULT = "default"


def skew_option(skew_s) -> dict:
    """The max_skew option for a skew in seconds (None: unbounded; DEFAULT: not passed)."""
    if skew_s == DEFAULT:
        return {}
    return {"max_skew": "unbounded" if skew_s is None else f"{int(skew_s * SECOND)} microseconds"}


def build_query(stream, lateness_s: int, window_s: int, slide_s: Optional[int] = None, skew_s=DEFAULT):
    return (
        kw.keyed_watermark(stream, key="device", event_time="ts", lateness=f"{lateness_s} seconds",
                           **skew_option(skew_s))
        .window(f"{window_s} seconds", slide=None if slide_s is None else f"{slide_s} seconds")
        .agg_with_report(
            F.count("*").alias("n"),
            F.sum("temp").alias("s"),
            F.min("temp").alias("lo"),
            F.max("temp").alias("hi"),
        )
    )


def run_with_progress(df, out_dir: Path, checkpoint: Path):
    """Like conftest.run_available, but also returns the query's per-batch progress."""
    query = run_to_end(df, out_dir, checkpoint)
    progress = list(query.recentProgress)
    # Numeric aggregates: the partials are Spark's HashAggregateExec's (invalid rows included).
    plan = executed_plan(query)
    assert "partials=hash-aggregate" in plan, plan
    # Event times and watermarks as micros, so nothing depends on the local time zone.
    rows = (
        df.sparkSession.read.schema(df.schema).parquet(str(out_dir))
        .select(
            "device", "kw_kind", "kw_late_rows", "kw_regressions", "n", "s", "lo", "hi",
            F.unix_micros("window.start").alias("start"),
            F.unix_micros("window.end").alias("end"),
            F.unix_micros("kw_watermark").alias("wm"),
        )
        .collect()
    )
    return rows, progress


def replay_and_run(spark, root: Path, batches, lateness_s: int, window_s: int,
                   slide_s: Optional[int] = None, skew_s=DEFAULT):
    replay = Replay(spark, root)
    replay.add_all(to_spark_rows(batches))
    assert replay.batches == len(batches)
    df = build_query(replay.stream(), lateness_s, window_s, slide_s, skew_s)
    return run_with_progress(df, root / "out", root / "checkpoint")


def check_against_model(batches, model: ModelResult, rows, progress, sliding: bool = False) -> None:
    """All assertions comparing one query's output and progress with the model."""
    def agg(values):
        present = [v for v in values if v is not None]
        return (len(values), float(sum(present)) if present else None,
                min(present) if present else None, max(present) if present else None)

    # 1. Emitted windows, their aggregates, and the key's watermark at the start of the
    #    emitting batch (all temps are integers, so the double sums are exact).
    got_windows = Counter(
        (r.device, r.start, r.end, r.n, r.s, r.lo, r.hi, r.wm) for r in rows if r.kw_kind == "window")
    want_windows = Counter(
        (w.key, w.start, w.end) + agg(w.values) + (w.watermark_at_start,) for w in model.emitted)
    assert got_windows == want_windows

    # 2. Late rows: one report row per (key, batch) with late rows, carrying the count and the
    #    key's watermark at the start of the batch; and the per-key totals.
    late_rows = [r for r in rows if r.kw_kind == "late"]
    assert Counter((r.device, r.kw_late_rows, r.wm) for r in late_rows) == Counter(
        (key, n, model.late_watermark[(b, key)]) for (b, key), n in model.late.items())
    got_late: Dict[str, int] = Counter()
    for r in late_rows:
        got_late[r.device] += r.kw_late_rows
    assert dict(got_late) == model.late_per_key()
    # Attempted regressions (a proposal below the skew floor): one row per key and batch.
    held = [r for r in rows if r.kw_kind == "watermark"]
    assert Counter((r.device, r.kw_regressions, r.wm) for r in held) == Counter(
        (key, count, wm) for _, key, count, wm in model.held)
    assert {r.kw_kind for r in rows} <= {"window", "late", "watermark"}

    # 3. Per-batch timing, from the observed metrics of each micro-batch (with a skew bound,
    #    Spark runs a trailing no-data batch when its global watermark moved: the model too).
    data_batches = {p.batchId: p for p in progress if p.numInputRows > 0}
    assert sorted(data_batches) == list(range(len(batches))), [p.batchId for p in progress]
    if model.batches > len(batches):
        assert len(progress) == model.batches, [p.batchId for p in progress]
    invalid = 0
    for p in progress:
        b = p.batchId
        out = p.observedMetrics["keyed_watermarks_output"]
        inp = p.observedMetrics.get("keyed_watermarks_input")
        want_emitted = model.emitted_in_batch(b)
        want_late = model.late_in_batch(b)
        assert (b, out["windows_emitted"], out["late_rows"]) == (b, want_emitted, want_late)
        if inp is not None:
            invalid += inp["null_key_rows"] + inp["null_event_time_rows"]
            assert inp["input_rows"] == (len(batches[b]) if b < len(batches) else 0)
    assert invalid == model.invalid

    # 4. Accounting: every input row is in an emitted window, still open, late, or invalid.
    #    (With sliding windows a row is in several windows, so the sum does not apply.)
    if sliding:
        return
    total = sum(len(b) for b in batches)
    aggregated = sum(r.n for r in rows if r.kw_kind == "window")
    late = sum(r.kw_late_rows for r in late_rows)
    assert aggregated + model.open_rows() + late + invalid == total


# --------------------------------------------------------------------------------------
# Generated streams
# --------------------------------------------------------------------------------------

# Skew bounds (seconds): unbounded, small enough that keys fall behind and leave state while
# others advance (and may return), and the default (an hour: never reached by these streams).
SKEWS_S = [None, 0, 15, 3600]


@pytest.mark.all_versions
@spark_examples(8)
@given(
    batches=packed_streams(),
    lateness_s=st.sampled_from(LATENESS_CHOICES_S),
    window_s=st.sampled_from(WINDOW_CHOICES_S),
    skew_s=st.sampled_from(SKEWS_S),
)
# Found by this test: a window ending at or before 0 registers its event-time timer at 0 ms, which
# Spark fired at once in the first batch (global watermark still 0) and then dropped; the window
# waited for the key's next row (emitted at 28 s instead of 12.999 s).
@example(batches=[[("a", -4_000_000, 5.0), ("b", 17_999_999, 12.0)], [("b", 33_000_001, 1.0)],
                  [("a", -5_000_000, 22.0)]], lateness_s=5, window_s=10, skew_s=0)
def test_operator_matches_reference_model(spark, tmp_path_factory, batches, lateness_s, window_s, skew_s):
    model = run_model(batches, lateness_s * SECOND, window_s * SECOND,
                      max_skew=None if skew_s is None else skew_s * SECOND)
    note(f"lateness={lateness_s}s window={window_s}s skew={skew_s}s batches={batches}")
    note(f"model={model}")
    root = tmp_path_factory.mktemp(f"model-{uuid.uuid4().hex[:8]}")
    rows, progress = replay_and_run(spark, root, batches, lateness_s, window_s, skew_s=skew_s)
    check_against_model(batches, model, rows, progress)


@spark_examples(5)
@given(
    batches=packed_streams(),
    lateness_s=st.sampled_from(LATENESS_CHOICES_S),
    window_slide=st.sampled_from([(10, 5), (10, 2), (6, 4), (5, 5)]),
)
def test_sliding_windows_match_reference_model(spark, tmp_path_factory, batches, lateness_s, window_slide):
    window_s, slide_s = window_slide
    model = run_model(batches, lateness_s * SECOND, window_s * SECOND, slide_s * SECOND)
    note(f"lateness={lateness_s}s window={window_s}s slide={slide_s}s batches={batches}")
    note(f"model={model}")
    root = tmp_path_factory.mktemp(f"sliding-{uuid.uuid4().hex[:8]}")
    rows, progress = replay_and_run(spark, root, batches, lateness_s, window_s, slide_s)
    check_against_model(batches, model, rows, progress, sliding=True)


def test_sliding_row_is_late_only_when_all_its_windows_are_closed(spark, workdir):
    # L = 0, S = 10 s, slide 5 s: a row at t belongs to [t5-5, t5+5) and [t5, t5+10).
    batches = [
        # batch 0: a@12 -> windows [5,15) and [10,20). End: wm(a) = 12.
        [("a", s(12), 1.0)],
        # batch 1: wm_1(a) = 12.
        #   a@8: windows [0,10) (end 10 <= 12: closed) and [5,15) (open) -> only into [5,15).
        #   a@3: windows [-5,5) and [0,10), both closed                 -> late.
        # End: wm(a) = 12 still: nothing new closes.
        [("a", s(8), 2.0), ("a", s(3), 4.0)],
        # batch 2: a@15 -> [10,20), [15,25). End: wm(a) = 15, so [5,15) closes with {12, 8}.
        [("a", s(15), 8.0)],
    ]
    model = run_model(batches, 0, 10 * SECOND, 5 * SECOND)
    assert [(w.start - BASE, w.batch, w.values) for w in model.emitted] == [(s(5) - BASE, 2, (1.0, 2.0))]
    assert model.late == {(1, "a"): 1}
    rows, progress = replay_and_run(spark, workdir, batches, 0, 10, 5)
    check_against_model(batches, model, rows, progress, sliding=True)


# --------------------------------------------------------------------------------------
# Hand-computed examples (documentation of the contract)
# --------------------------------------------------------------------------------------

def s(seconds: float) -> int:
    return BASE + int(seconds * SECOND)


def test_fast_key_does_not_make_slow_key_late(spark, workdir):
    # L = 5 s, S = 10 s; times below are seconds after BASE.
    batches = [
        # batch 0: no watermark yet, both rows on time. End: wm(a) = 3-5 = -2, wm(b) = 4-5 = -1.
        [("a", s(3), 1.0), ("b", s(4), 10.0)],
        # batch 1: a jumps ahead. End: wm(a) = 100-5 = 95, so a's window [0,10) (end 10 <= 95)
        # is emitted in batch 1 with n=1. wm(b) stays -1: other keys never move it.
        [("a", s(100), 2.0)],
        # batch 2: wm_2(a) = 95, wm_2(b) = -1.
        #   a@50: window [50,60), end 60 <= 95            -> late for a (1 row).
        #   b@8:  window [0,10),  end 10 >  -1            -> on time, although a is at 95.
        #   b@16: window [10,20)                           -> on time.
        # End: wm(b) = 16-5 = 11, so b's [0,10) (end 10 <= 11) is emitted in batch 2 with
        # rows {4, 8}: n=2, s=30. b's [10,20) and a's [100,110) stay open (1 row each).
        [("a", s(50), 3.0), ("b", s(8), 20.0), ("b", s(16), 30.0)],
    ]
    model = run_model(batches, 5 * SECOND, 10 * SECOND)
    assert [(w.key, w.start - BASE, w.batch, w.values) for w in model.emitted] == [
        ("a", 0, 1, (1.0,)),
        ("b", 0, 2, (10.0, 20.0)),
    ]
    assert model.late == {(2, "a"): 1}
    assert model.open == {("a", s(100)): [2.0], ("b", s(10)): [30.0]}

    rows, progress = replay_and_run(spark, workdir, batches, 5, 10)
    windows = sorted((r.device, r.start - BASE, r.n, r.s) for r in rows if r.kw_kind == "window")
    assert windows == [("a", 0, 1, 1.0), ("b", 0, 2, 30.0)]
    late = [(r.device, r.kw_late_rows, r.wm - BASE) for r in rows if r.kw_kind == "late"]
    assert late == [("a", 1, 95 * SECOND)]
    check_against_model(batches, model, rows, progress)


def test_same_batch_rows_never_late_and_boundary_closes(spark, workdir):
    # L = 0 s, S = 10 s; times below are seconds after BASE.
    batches = [
        # batch 0: no watermark at the start, so a@3 is on time although a@25 comes first in
        # the same batch. End: wm(a) = 25 -> [0,10) (end 10 <= 25) emitted in batch 0, n=1.
        [("a", s(25), 1.0), ("a", s(3), 2.0)],
        # batch 1: wm_1(a) = 25.
        #   a@9.999999: window [0,10), end 10 <= 25  -> late.
        #   a@20:       window [20,30), end 30 > 25  -> on time (joins a@25).
        #   a@30:       window [30,40)               -> on time.
        # End: wm(a) = 30 -> [20,30) is emitted (end 30 <= 30: equality closes) with
        # n=2, s=1+4=5; [30,40) stays open.
        [("a", s(10) - 1, 3.0), ("a", s(20), 4.0), ("a", s(30), 5.0)],
    ]
    model = run_model(batches, 0, 10 * SECOND)
    assert [(w.start - BASE, w.batch, w.values) for w in model.emitted] == [
        (0, 0, (2.0,)),
        (20 * SECOND, 1, (1.0, 4.0)),
    ]
    assert model.late == {(1, "a"): 1}

    rows, progress = replay_and_run(spark, workdir, batches, 0, 10)
    check_against_model(batches, model, rows, progress)


def test_key_that_left_state_returns_behind_the_skew_floor(spark, workdir):
    """max_skew: a silent key whose windows the floor closed leaves state; when it returns, its
    watermark starts at the floor, so a row for its emitted window is late (not a second
    emission of that window). L = 0, S = 10 s, max_skew = 5 s; times are seconds after BASE."""
    batches = [
        # batch 0: no global watermark yet. End: wm(a) = 1, wm(b) = 2; Spark's E becomes 2.
        [("a", s(1), 1.0), ("b", s(2), 2.0)],
        # batch 1: floor E - 5 = -3 moves nothing. End: wm(a) = 30, a's [0,10) is emitted.
        [("a", s(30), 3.0)],
        # batch 2: E = 30, floor 25 >= 10: b's timer emits b's [0,10); b has no window left
        # and leaves state. End: wm(a) = 45, a's [30,40) is emitted.
        [("a", s(45), 4.0)],
        # batch 3: E = 45, floor 40. b returns without state: wm_3(b) = 40, so b@8 is late
        # (its window [0,10) was emitted in batch 2) and b@47 opens [40,50).
        [("b", s(8), 5.0), ("b", s(47), 6.0)],
    ]
    model = run_model(batches, 0, 10 * SECOND, max_skew=5 * SECOND)
    assert [(w.key, w.start - BASE, w.batch, w.values) for w in model.emitted] == [
        ("a", 0, 1, (1.0,)), ("a", 30 * SECOND, 2, (3.0,)), ("b", 0, 2, (2.0,))]
    assert model.late == {(3, "b"): 1} and model.late_watermark[(3, "b")] == s(40)
    assert model.released == [(2, "b")]
    assert model.batches == 5  # E moved 45 -> 47 with batch 3: a trailing no-data batch
    rows, progress = replay_and_run(spark, workdir, batches, 0, 10, skew_s=5)
    check_against_model(batches, model, rows, progress)

    def keys_in_state(batch_id):
        return sorted(r.key.kw_key_0 for r in spark.read.format("statestore")
                      .option("path", str(workdir / "checkpoint")).option("stateVarName", "key_state")
                      .option("batchId", batch_id).load().collect())
    assert [keys_in_state(b) for b in range(5)] == [["a", "b"], ["a", "b"], ["a"], ["a", "b"], ["a", "b"]]


def test_timer_kept_early_fires_without_a_trace(spark, workdir):
    """max_skew: a key whose own rows close its windows keeps the event-time timer of its first
    window (moving it each window would cost state store writes); when that timer fires before
    the floor reaches the key's open window, nothing is emitted, the key does not count in the
    batch's metrics, and the timer moves to when the floor does reach it, where the window is
    emitted. L = 0, S = 10 s, max_skew = 5 s; times are seconds after BASE."""
    batches = [
        # batch 0: a's [0,10) needs the floor at 10, i.e. E = 15: its timer is set at 15 s.
        [("a", s(1), 1.0), ("b", s(1), 1.0)],
        # batches 1, 2: a's own rows close [0,10), then [10,20); the timer stays at 15 s.
        [("a", s(11), 2.0), ("b", s(11), 2.0)],
        [("a", s(21), 3.0), ("b", s(21), 3.0)],
        # batch 3: E = 21 fires a's timer (a sends nothing): floor 16 closes nothing (a's open
        # window is [20,30)); its timer moves to 35 s.
        [("b", s(26), 4.0)],
        # batch 4: E = 26. batch 5: E = 41, floor 36: a's [20,30) is emitted and a leaves state.
        [("b", s(41), 5.0)],
        [("b", s(51), 6.0)],
    ]
    model = run_model(batches, 0, 10 * SECOND, max_skew=5 * SECOND)
    assert [(w.batch, w.start - BASE) for w in model.emitted if w.key == "a"] == [
        (1, 0), (2, 10 * SECOND), (5, 20 * SECOND)]
    assert "a" not in model.batch_keys[3].handled and "a" in model.batch_keys[5].handled
    rows, progress = replay_and_run(spark, workdir, batches, 0, 10, skew_s=5)
    check_against_model(batches, model, rows, progress)
    assert [kw.metrics(p)["keys_in_batch"] for p in progress] == [len(b.handled) for b in model.batch_keys]

    def timer_of_a(batch_id):
        timers = (spark.read.format("statestore").option("path", str(workdir / "checkpoint"))
                  .option("readRegisteredTimers", "true").option("batchId", batch_id).load().collect())
        return [t.expiration_timestamp_ms - BASE // 1000 for t in timers if t.key.kw_key_0 == "a"]
    # The mechanism itself: kept at 15 s through batches 1 and 2, moved to 35 s by batch 3.
    assert [timer_of_a(b) for b in range(6)] == [[15_000], [15_000], [15_000], [35_000], [35_000], []]


# --------------------------------------------------------------------------------------
# Session windows against the session model
# --------------------------------------------------------------------------------------


@pytest.mark.all_versions
@spark_examples(6)
@given(batches=packed_streams(), lateness_s=st.sampled_from([0, 5]), gap_s=st.sampled_from([3, 10, None]),
       allowed_s=st.sampled_from([0, 0, 6]))
def test_sessions_match_session_model(spark, tmp_path_factory, batches, lateness_s, gap_s, allowed_s):
    """Emitted sessions (bounds, values, revision), the micro-batch of each emission and
    per-key late counts equal the session model's, over random multi-key streams and batch
    splits; with a fixed or a per-row gap (gap_s None), with and without allowed lateness."""
    gap = per_row_gap if gap_s is None else gap_s * SECOND
    model = run_session_model(batches, lateness_s * SECOND, gap, allowed_s * SECOND)
    note(f"lateness={lateness_s}s gap={gap_s}s allowed={allowed_s}s model={model}")
    root = tmp_path_factory.mktemp(f"sessions-{uuid.uuid4().hex[:8]}")
    replay = Replay(spark, root)
    replay.add_all(to_spark_rows(batches))
    gap_arg = (F.when(F.col("temp") > 20, "10 seconds").when(F.col("temp") >= 0, "3 seconds")
               .when(F.col("temp") < 0, "0 seconds") if gap_s is None else f"{gap_s} seconds")
    df = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness=f"{lateness_s} seconds")
          .session(gap_arg, allowed_lateness=f"{allowed_s} seconds" if allowed_s else None)
          .agg_with_report(F.count("*").alias("n"), F.sort_array(F.collect_list("temp")).alias("temps")))
    query = run_to_end(df, root / "out", root / "checkpoint")
    revision = F.col("revision") if allowed_s else F.lit(0)
    rows = (spark.read.schema(df.schema).parquet(str(root / "out"))
            .select("device", "kw_kind", "kw_late_rows", "temps", revision.alias("revision"),
                    F.unix_micros("session_window.start").alias("start"),
                    F.unix_micros("session_window.end").alias("end"))
            .collect())

    def values(vs):
        return tuple(sorted(vs, key=repr))

    got = Counter((r.device, r.start, r.end, values(r.temps), r.revision) for r in rows if r.kw_kind == "window")
    # collect_list skips nulls, as Spark does.
    want = Counter((s.key, s.start, s.end, values([v for v in s.values if v is not None]), s.revision)
                   for s in model.emitted)
    assert got == want
    assert_late_per_key(rows, model.late)
    progress = query.recentProgress
    per_batch = {p.batchId: p.observedMetrics["keyed_watermarks_output"]["windows_emitted"] for p in progress}
    want_batch = Counter(s.batch for s in model.emitted)
    assert {b: n for b, n in per_batch.items() if n} == dict(want_batch)
    invalid = sum(p.observedMetrics["keyed_watermarks_input"]["null_key_rows"]
                  + p.observedMetrics["keyed_watermarks_input"]["null_event_time_rows"]
                  + p.observedMetrics["keyed_watermarks_input"].asDict().get("invalid_gap_rows", 0)
                  for p in progress if "keyed_watermarks_input" in p.observedMetrics)
    assert invalid == model.invalid
