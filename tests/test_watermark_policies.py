"""Watermark policies (docs/semantics.md, "Watermark policies") against the pure-Python model
in tests/policy_model.py, over random multi-key streams and micro-batch splits (hypothesis),
plus closing='global' against Spark's own withWatermark aggregation.

Each example replays its micro-batches through Spark's file source and compares the emitted
windows (bounds and values), the micro-batch of every emission (observed metrics), per-key
late counts and attempted watermark regressions with the model.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Dict

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from pyspark.errors import IllegalArgumentException
from pyspark.sql import functions as F

import keyed_watermarks as kw
from policy_model import Policy, run_policy_model
from support import (
    BASE, SECOND, Replay, assert_late_per_key, executed_plan, policy_stream, run_to_end, spark_examples, ts,
)

WINDOW_S = 10
SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, lat STRING, src STRING"


def run_ours(spark, root: Path, batches, lateness_s: int, numeric: bool = False, **options):
    """numeric: count, sum, min and max only (fixed-width buffers: Spark's HashAggregateExec
    partials) instead of count and the sorted list of values (the on-heap partials)."""
    replay = Replay(spark, root, schema=SCHEMA)
    replay.add_all([[(k, ts(t), v, None if lat is None else f"{lat // SECOND} seconds", s)
                     for k, t, v, lat, s in b] for b in batches])
    report = (
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts",
                           lateness=f"{lateness_s} seconds", **options)
        .window(f"{WINDOW_S} seconds")
        .agg_with_report(F.count("*").alias("n"), *(
            [F.sum("temp").alias("s"), F.min("temp").alias("lo"), F.max("temp").alias("hi")] if numeric
            else [F.sort_array(F.collect_list("temp")).alias("temps")]))
    )
    query = run_to_end(report, root / "out", root / "checkpoint")
    plan = executed_plan(query)
    assert ("partials=hash-aggregate" if numeric else "partials=on-heap") in plan, plan
    values = ["s", "lo", "hi"] if numeric else ["temps"]
    rows = (spark.read.schema(report.schema).parquet(str(root / "out"))
            .select("device", "kw_kind", "kw_late_rows", "kw_regressions", "n", *values,
                    F.unix_micros("window.start").alias("start"), F.unix_micros("window.end").alias("end"))
            .collect())
    return rows, list(query.recentProgress)


def check(rows, progress, model, batches, numeric: bool = False) -> None:
    def values(vals):
        return (len(vals), round(sum(vals), 6), min(vals), max(vals)) if numeric else tuple(vals)
    got = Counter((r.device, r.start, r.end, (r.n, round(r.s, 6), r.lo, r.hi) if numeric else tuple(r.temps))
                  for r in rows if r.kw_kind == "window")
    want = Counter((k, s, e, values(vals)) for k, s, e, _, vals in model.emitted)
    assert got == want
    late = assert_late_per_key(rows, model.late)
    regressions: Dict[str, int] = {}
    for r in rows:
        if r.kw_kind == "watermark":
            regressions[r.device] = max(regressions.get(r.device, 0), r.kw_regressions)
    assert regressions == model.regressions
    held = sum(p.observedMetrics["keyed_watermarks_output"]["keys_with_held_watermark"] for p in progress)
    assert held == model.regression_events
    per_batch = {p.batchId: p.observedMetrics["keyed_watermarks_output"]["windows_emitted"] for p in progress}
    want_per_batch = Counter(b for _, _, _, b, _ in model.emitted)
    assert {b: n for b, n in per_batch.items() if n} == dict(want_per_batch)
    # Accounting: emitted + still open + late = input (no invalid rows here).
    emitted_rows = sum(r.n for r in rows if r.kw_kind == "window")
    assert emitted_rows + model.open_rows + sum(late.values()) == sum(len(b) for b in batches)


def spark_with_watermark_windows(spark, tmp_path: Path, batches) -> Counter:
    """Spark's own withWatermark("ts", "5 seconds") aggregation over the same micro-batches:
    (device, window start, sorted temps) of every window it emits."""
    replay = Replay(spark, tmp_path / "spark", schema=SCHEMA)
    replay.add_all([[(k, ts(t), v, None, s) for k, t, v, _, s in b] for b in batches])
    native = (replay.stream().withWatermark("ts", "5 seconds")
              .groupBy("device", F.window("ts", f"{WINDOW_S} seconds"))
              .agg(F.sort_array(F.collect_list("temp")).alias("temps")))
    run_to_end(native, tmp_path / "spark" / "out", tmp_path / "spark" / "checkpoint")
    return Counter((r.device, r.start, tuple(r.temps)) for r in spark.read.schema(native.schema)
                   .parquet(str(tmp_path / "spark" / "out"))
                   .select("device", F.unix_micros("window.start").alias("start"), "temps").collect())


@spark_examples(4)
@given(batches=policy_stream(), lateness_s=st.sampled_from([0, 5]))
def test_key_lateness_mapping_matches_model(spark, tmp_path_factory, batches, lateness_s):
    """key_lateness={key: duration}: keys not in the mapping use the default lateness."""
    table = {}
    for b in batches:
        for k, _, _, lat, _ in b:
            if lat is not None:
                table[k] = lat
    mapping = {k: f"{v // SECOND} seconds" for k, v in table.items()}
    rows_for_model = [[(k, t, v, table.get(k), s) for k, t, v, _, s in b] for b in batches]
    model = run_policy_model(rows_for_model, WINDOW_S * SECOND, Policy(lateness_s * SECOND, column_lateness=True))
    note(f"mapping={mapping} model={model}")
    rows, progress = run_ours(spark, tmp_path_factory.mktemp("map"), rows_for_model, lateness_s,
                              key_lateness=mapping)
    check(rows, progress, model, batches)


@pytest.mark.parametrize("numeric", [False, True], ids=["on-heap", "hash-aggregate"])
@spark_examples(4)
@given(batches=policy_stream(per_key_lateness=True), lateness_s=st.sampled_from([2, 10]))
def test_key_lateness_column_matches_model(spark, tmp_path_factory, numeric, batches, lateness_s):
    """key_lateness=F.col(...): a key's lateness is the largest of its latest batch's rows
    (null: the default); a larger lateness would move the watermark back: held and counted.
    Both partial paths carry each partial's largest lateness."""
    model = run_policy_model(batches, WINDOW_S * SECOND, Policy(lateness_s * SECOND, column_lateness=True))
    note(f"model={model}")
    rows, progress = run_ours(spark, tmp_path_factory.mktemp("col"), batches, lateness_s, numeric=numeric,
                              key_lateness=F.col("lat"))
    check(rows, progress, model, batches, numeric=numeric)


@pytest.mark.parametrize("numeric", [False, True], ids=["on-heap", "hash-aggregate"])
def test_key_lateness_is_the_largest_within_one_partial(spark, workdir, numeric):
    """Two rows of one window in one batch, lateness 1 s and 20 s: the key's lateness is 20 s,
    so its watermark after batch 0 is 25 - 20 = 5 s and [0, 10) stays open until batch 1. (A
    partial that kept the smaller lateness would give 24 s and close it in batch 0.)"""
    s = SECOND
    batches = [
        [("d1", BASE + 1 * s, 1.0, 1 * s, None), ("d1", BASE + 2 * s, 2.0, 20 * s, None),
         ("d1", BASE + 25 * s, 3.0, 1 * s, None)],
        [("d1", BASE + 100 * s, 4.0, 1 * s, None)],
    ]
    rows, progress = run_ours(spark, workdir, batches, 2, numeric=numeric, key_lateness=F.col("lat"))
    emitted = {p.batchId: p.observedMetrics["keyed_watermarks_output"]["windows_emitted"] for p in progress}
    assert (emitted.get(0), emitted.get(1)) == (0, 2)
    assert sorted((r.start - BASE, r.n) for r in rows if r.kw_kind == "window") == [(0, 2), (20 * s, 1)]


@spark_examples(4)
@given(batches=policy_stream(max_rows=40), q=st.sampled_from([0.5, 0.9, 1.0]))
def test_adaptive_lateness_matches_model(spark, tmp_path_factory, batches, q):
    """Per key, lateness = nearest-rank quantile of how far rows trail the key's max, in [1 s, 12 s]."""
    model = run_policy_model(batches, WINDOW_S * SECOND, Policy(5 * SECOND, adaptive=(q, SECOND, 12 * SECOND)))
    note(f"model={model}")
    rows, progress = run_ours(spark, tmp_path_factory.mktemp("adaptive"), batches, 5,
                              adaptive_lateness=kw.AdaptiveLateness(q, min="1 second", max="12 seconds"))
    check(rows, progress, model, batches)


@spark_examples(4)
@given(batches=policy_stream(), expected=st.sampled_from([[], ["a", "b"]]))
def test_min_of_sources_matches_model(spark, tmp_path_factory, batches, expected):
    """source=...: the key's watermark is the min over its sources (once all expected reported)."""
    model = run_policy_model(batches, WINDOW_S * SECOND, Policy(3 * SECOND, sources=expected))
    note(f"model={model}")
    rows, progress = run_ours(spark, tmp_path_factory.mktemp("src"), batches, 3,
                              source="src", sources=expected or None)
    check(rows, progress, model, batches)


@spark_examples(6)
@given(data=st.data(), skew_s=st.sampled_from([0, 10, 30]), per_key=st.booleans())
def test_max_skew_matches_model(spark, tmp_path_factory, data, skew_s, per_key):
    """max_skew: no key's progress trails Spark's global watermark by more than the skew (plus
    the key's own extra lateness, with per-key lateness); keys left without windows leave state
    and start again at the floor when they return."""
    batches = data.draw(policy_stream(per_key_lateness=per_key))
    model = run_policy_model(batches, WINDOW_S * SECOND,
                             Policy(5 * SECOND, max_skew=skew_s * SECOND, column_lateness=per_key))
    note(f"model={model}")
    options = {"key_lateness": F.col("lat")} if per_key else {}
    rows, progress = run_ours(spark, tmp_path_factory.mktemp("skew"), batches, 5, max_skew=f"{skew_s} seconds",
                              **options)
    check(rows, progress, model, batches)
    assert len(progress) == model.batches


@spark_examples(4)
@given(batches=policy_stream())
def test_global_closing_matches_model(spark, tmp_path_factory, batches):
    """closing='global': every key closes on Spark's global watermark."""
    model = run_policy_model(batches, WINDOW_S * SECOND, Policy(5 * SECOND, global_closing=True))
    note(f"model={model}")
    rows, progress = run_ours(spark, tmp_path_factory.mktemp("global"), batches, 5, closing="global")
    check(rows, progress, model, batches)


def test_global_closing_equals_spark_with_watermark(spark, tmp_path):
    """closing='global' emits what Spark's own withWatermark aggregation emits, on a multi-key
    stream whose late rows are late by both engines' rules (Spark checks late rows against
    the watermark one batch older than ours, see docs/semantics.md)."""
    def at(s):
        return BASE + s * SECOND
    batches = [
        [("fast", at(1), 1.0, None, "a"), ("slow", at(2), 2.0, None, "a")],
        [("fast", at(25), 3.0, None, "a"), ("slow", at(4), 4.0, None, "a"), ("slow", at(12), 5.0, None, "a")],
        [("fast", at(41), 6.0, None, "a"), ("slow", at(22), 7.0, None, "a")],
        [("fast", at(63), 8.0, None, "a"), ("slow", at(3), 9.0, None, "a"), ("slow", at(61), 10.0, None, "a")],
        [("slow", at(14), 11.0, None, "a"), ("fast", at(70), 12.0, None, "a")],
    ]
    rows, _ = run_ours(spark, tmp_path / "ours", batches, 5, closing="global")
    ours = Counter((r.device, r.start, tuple(r.temps)) for r in rows if r.kw_kind == "window")

    theirs = spark_with_watermark_windows(spark, tmp_path, batches)
    assert ours == theirs
    assert len(ours) >= 6


@spark_examples(4)
@given(batches=policy_stream(), skew_s=st.sampled_from([20, 3600]))
def test_fleet_closing_matches_model(spark, tmp_path_factory, batches, skew_s):
    """closing='fleet': every key follows Spark's global watermark behind its learnt skew."""
    model = run_policy_model(batches, WINDOW_S * SECOND, Policy(5 * SECOND, max_skew=skew_s * SECOND, fleet=True))
    note(f"model={model}")
    rows, progress = run_ours(spark, tmp_path_factory.mktemp("fleet"), batches, 5, closing="fleet",
                              max_skew=f"{skew_s} seconds")
    check(rows, progress, model, batches)
    assert len(progress) == model.batches


@pytest.mark.all_versions
def test_fleet_closing_equals_spark_with_watermark_for_keys_in_step(spark, tmp_path):
    """closing='fleet' on keys in step with the fleet (rows in every micro-batch) emits what
    Spark's own withWatermark aggregation emits, late rows included: a row Spark still takes by
    its one batch of grace (window end above the watermark of the batch before) is on time for
    the fleet floor too, one older than that is late for both; today's default (the key's own
    watermark) drops the former. (The rows behind the fleet do not move their key's max event
    time, so they teach no skew: every key keeps a skew of 0.)"""
    def at(s):
        return BASE + s * SECOND
    batches = [
        [("a", at(1), 1.0, None, "x"), ("b", at(2), 2.0, None, "x")],
        [("a", at(14), 3.0, None, "x"), ("b", at(15), 4.0, None, "x")],
        [("a", at(27), 5.0, None, "x"), ("b", at(26), 6.0, None, "x"), ("b", at(12), 7.0, None, "x")],
        [("a", at(38), 8.0, None, "x"), ("b", at(39), 9.0, None, "x"), ("a", at(9), 10.0, None, "x"),
         ("a", at(21), 11.0, None, "x")],
        [("a", at(52), 12.0, None, "x"), ("b", at(51), 13.0, None, "x"), ("b", at(28), 14.0, None, "x")],
        [("a", at(80), 15.0, None, "x"), ("b", at(81), 16.0, None, "x")],
    ]
    rows, _ = run_ours(spark, tmp_path / "ours", batches, 5, closing="fleet")
    ours = Counter((r.device, r.start, tuple(r.temps)) for r in rows if r.kw_kind == "window")
    late = sum(r.kw_late_rows for r in rows if r.kw_kind == "late")

    theirs = spark_with_watermark_windows(spark, tmp_path, batches)
    assert ours == theirs
    assert late == 1 and len(ours) >= 8
    model = run_policy_model(batches, WINDOW_S * SECOND, Policy(5 * SECOND))
    assert sum(model.late.values()) > late  # the default's own watermark drops more


@pytest.mark.parametrize("options, message", [
    ({"clock": "wall"}, "clock"),
    ({"closing": "fastest"}, "closing"),
    ({"advance_when_idle": True}, "idle_timeout"),
    ({"sources": ["a"]}, "source"),
    ({"source_idle_timeout": "1 minute"}, "source"),
])
def test_bad_policy_options_raise_before_start(spark, tmp_path, options, message):
    stream = Replay(spark, tmp_path, schema=SCHEMA).stream()
    # Checked in the JVM, like every option: the same error on classic and Spark Connect.
    with pytest.raises(IllegalArgumentException, match=message):
        kw.keyed_watermark(stream, key="device", event_time="ts", lateness="5 seconds", **options)


@pytest.mark.parametrize("options, message", [
    ({"max_skew": "1 minute", "idle_timeout": "1 minute"}, "max_skew"),
    ({"closing": "global", "key_lateness": {"a": "1 second"}}, "closing='global'"),
    ({"clock": "processing_time", "source": "src"}, "processing_time"),
    (lambda: {"key_lateness": F.col("temp")}, "lateness"),
    (lambda: {"key_lateness": F.col("nope")}, "nope"),
    ({"adaptive_lateness": kw.AdaptiveLateness(0.9, min="1 minute", max="1 second")}, "adaptive_lateness.min"),
    ({"adaptive_lateness": kw.AdaptiveLateness(1.5)}, "quantile"),
    ({"max_skew": "-1 second"}, "max_skew"),
    ({"closing": "fleet", "key_lateness": {"a": "1 second"}}, "closing='fleet'"),
    ({"closing": "fleet", "max_skew": "unbounded"}, "closing='fleet'.*unbounded"),
    ({"closing": "fleet", "idle_timeout": "1 minute"}, "closing='fleet'"),
])
def test_policy_conflicts_raise_before_start(spark, tmp_path, options, message):
    from pyspark.errors import AnalysisException
    stream = Replay(spark, tmp_path, schema=SCHEMA).stream()
    options = options() if callable(options) else options
    with pytest.raises((IllegalArgumentException, AnalysisException), match=message):
        kw.keyed_watermark(stream, key="device", event_time="ts", lateness="5 seconds", **options)


def test_key_lateness_mapping_needs_one_key_column(spark, tmp_path):
    stream = Replay(spark, tmp_path, schema=SCHEMA).stream()
    with pytest.raises(IllegalArgumentException, match="single key column"):
        kw.keyed_watermark(stream, key=["device", "src"], event_time="ts", lateness="5 seconds",
                           key_lateness={"a": "1 second"})
