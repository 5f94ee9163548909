"""A bad value in one row never stops the query nor changes other rows' results: it makes that
row invalid, counted with its reason (docs/semantics.md, "Rows that are not aggregated").

- per-key lateness column: an unparsable string or a negative duration;
- event time further ahead of the micro-batch's processing time than ``max_ahead`` (a device
  whose clock says 9999): without the guard, such a row would move its key's watermark (and
  Spark's global watermark, which the skew bound follows) to 9999 and make every later row late.

Each test compares the query with the policy model (tests/policy_model.py) run over the valid
rows only, and counts the invalid rows in the input metrics and as kept ``invalid_row`` rows.
"""

from __future__ import annotations

import datetime
from collections import Counter

from pyspark.sql import functions as F

import keyed_watermarks as kw
from policy_model import Policy, run_policy_model
from support import BASE, SECOND, Replay, run_to_end, ts

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, lat STRING"
FAR_FUTURE = int(datetime.datetime(9999, 1, 1, tzinfo=datetime.timezone.utc).timestamp()) * SECOND


def at(seconds: int) -> int:
    return BASE + seconds * SECOND


def run(spark, root, batches, **options):
    """Runs the keyed query over (device, micros, temp, lateness string) rows; returns the
    report rows (windows as (device, start, sorted temps)), kept invalid rows and progress."""
    replay = Replay(spark, root, schema=SCHEMA)
    replay.add_all([[(d, ts(t), v, lat) for d, t, v, lat in b] for b in batches])
    report = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="2 seconds", **options)
              .window("10 seconds")
              .agg_with_report(F.sort_array(F.collect_list("temp")).alias("temps"), keep_late_rows=True))
    query = run_to_end(report, root / "out", root / "checkpoint")
    rows = spark.read.schema(report.schema).parquet(str(root / "out")).select(
        "device", "kw_kind", "kw_late_rows", "kw_reason", "temps", F.col("kw_late_row.temp").alias("row_temp"),
        F.unix_micros("window.start").alias("start")).collect()
    return rows, list(query.recentProgress)


def windows(rows):
    return Counter((r.device, r.start, tuple(r.temps)) for r in rows if r.kw_kind == "window")


def model_windows(model):
    return Counter((k, s, vals) for k, s, _, _, vals in model.emitted)


def input_total(progress, name):
    return sum(p.observedMetrics["keyed_watermarks_input"][name]
               for p in progress if "keyed_watermarks_input" in p.observedMetrics)


def test_unparsable_or_negative_lateness_is_an_invalid_row(spark, workdir):
    # Key a's lateness is 5 s from its good rows; 'abc' and '-5 seconds' must neither fall back
    # to the default (2 s) nor stop the query: those rows are invalid, counted, returned.
    batches = [
        [("a", at(1), 1.0, "5 seconds"), ("a", at(3), 2.0, "abc"), ("b", at(2), 3.0, None)],
        [("a", at(14), 4.0, "5 seconds"), ("a", at(12), 5.0, "-5 seconds"), ("b", at(13), 6.0, None)],
        [("a", at(16), 7.0, "5 seconds"), ("b", at(30), 8.0, "1 second")],
    ]
    bad = {2.0, 5.0}
    rows, progress = run(spark, workdir, batches, key_lateness=F.col("lat"))

    valid = [[(d, t, v, None if lat is None else int(lat.split()[0]) * SECOND, None)
              for d, t, v, lat in b if v not in bad] for b in batches]
    model = run_policy_model(valid, 10 * SECOND, Policy(2 * SECOND, column_lateness=True))
    assert windows(rows) == model_windows(model)
    # a's [0,10) closes only once a's watermark (lateness 5 s) reaches 10: at a@16, batch 2.
    assert ("a", at(0), (1.0,)) in windows(rows)
    assert input_total(progress, "invalid_lateness_rows") == 2
    invalid = sorted((r.row_temp, r.kw_reason) for r in rows if r.kw_kind == "invalid_row")
    assert invalid == [(2.0, "unparsable or negative per-key lateness"),
                       (5.0, "unparsable or negative per-key lateness")]


def test_row_far_ahead_of_processing_time_is_invalid_and_moves_no_watermark(spark, workdir):
    # One row of a dated 9999 (a device clock reset) in batch 1. With the default guard
    # (max_ahead one day) it is invalid: a's later rows stay on time, and Spark's global
    # watermark (which the default skew bound follows) does not jump to 9999, so b's windows
    # are not closed by the floor either.
    batches = [
        [("a", at(1), 1.0, None), ("b", at(2), 2.0, None)],
        [("a", FAR_FUTURE, 3.0, None), ("a", at(5), 4.0, None), ("b", at(6), 5.0, None)],
        [("a", at(12), 6.0, None), ("a", at(8), 7.0, None), ("b", at(9), 8.0, None)],
        [("a", at(25), 9.0, None), ("b", at(25), 10.0, None)],
    ]
    rows, progress = run(spark, workdir, batches)
    valid = [[(d, t, v, None, None) for d, t, v, _ in b if t != FAR_FUTURE] for b in batches]
    model = run_policy_model(valid, 10 * SECOND, Policy(2 * SECOND))
    assert windows(rows) == model_windows(model)
    assert Counter(windows(rows)) == Counter({("a", at(0), (1.0, 4.0, 7.0)): 1, ("b", at(0), (2.0, 5.0, 8.0)): 1,
                                              ("a", at(10), (6.0,)): 1})
    assert not [r for r in rows if r.kw_kind == "late"]
    assert input_total(progress, "future_event_time_rows") == 1
    (invalid,) = [r for r in rows if r.kw_kind == "invalid_row"]
    assert (invalid.row_temp, invalid.kw_reason) == (3.0, "event time too far ahead of processing time (max_ahead)")


def test_max_ahead_can_be_set_or_turned_off(spark, workdir):
    # A row 2 hours ahead of processing time is valid with the default guard (a day) and
    # invalid with max_ahead='1 hour'; with 'unbounded' no row is ever too far ahead.
    now = int(datetime.datetime.now(datetime.timezone.utc).timestamp()) * SECOND
    batches = [[("a", now + 2 * 3600 * SECOND, 1.0, None), ("a", now, 2.0, None)]]
    for option, want in [({}, 0), ({"max_ahead": "1 hour"}, 1), ({"max_ahead": "unbounded"}, None)]:
        root = workdir / f"run-{len(option)}-{want}"
        _, progress = run(spark, root, batches, **option)
        metrics = [p.observedMetrics["keyed_watermarks_input"].asDict()
                   for p in progress if p.numInputRows > 0]
        assert [m.get("future_event_time_rows") for m in metrics] == [want]
