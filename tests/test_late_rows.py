"""Late rows kept as rows (``agg_with_report(..., keep_late_rows=True)``): results and late
rows written from one query to two sinks with ``kw.foreach_batch``; compared with the
reference model; every input row is aggregated, still open, late or invalid."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from pyspark.sql import functions as F

import keyed_watermarks as kw
from reference_model import run_model
from support import (
    LATENESS_CHOICES_S, SECOND, Replay, packed_streams, spark_examples, start_to_end, to_spark_rows,
)


def run_two_sinks(spark, root, batches, lateness_s: int, window_s: int, slide_s=None):
    replay = Replay(spark, root)
    replay.add_all(to_spark_rows(batches))
    report = (
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness=f"{lateness_s} seconds")
        .window(f"{window_s} seconds", slide=None if slide_s is None else f"{slide_s} seconds")
        .agg_with_report(F.count("*").alias("n"), F.sum("temp").alias("s"), keep_late_rows=True)
    )
    results_dir, late_dir = root / "results", root / "late"
    start_to_end(report.writeStream.foreachBatch(kw.foreach_batch(
        results=lambda df, _: df.write.mode("append").parquet(str(results_dir)),
        late_rows=lambda df, _: df.write.mode("append").parquet(str(late_dir)),
    )), root / "checkpoint")
    results = spark.read.parquet(str(results_dir)).select(
        "device", F.unix_micros("window.start").alias("start"), "n", "s").collect()
    late = spark.read.parquet(str(late_dir)).select(
        "device", F.unix_micros("ts").alias("t"), "temp", F.unix_micros("kw_watermark").alias("wm"),
        "kw_reason").collect()
    return results, late, report


@spark_examples(5)
@given(batches=packed_streams(), lateness_s=st.sampled_from(LATENESS_CHOICES_S), window_s=st.sampled_from([5, 10]))
def test_late_rows_are_kept_and_every_row_is_accounted_for(spark, tmp_path_factory, batches, lateness_s, window_s):
    model = run_model(batches, lateness_s * SECOND, window_s * SECOND)
    note(f"lateness={lateness_s}s window={window_s}s batches={batches} model={model}")
    root = tmp_path_factory.mktemp(f"late-{uuid.uuid4().hex[:8]}")
    results, late, report = run_two_sinks(spark, root, batches, lateness_s, window_s)

    # The late rows, with their original columns and the key's watermark at batch start.
    invalid = [r for r in late if r.kw_reason in ("null key", "null event time")]
    late = [r for r in late if r not in invalid]
    assert Counter((r.device, r.t, r.temp, r.wm) for r in late) == Counter(
        (key, t, value, model.late_watermark[(b, key)]) for b, key, t, value in model.late_rows)
    assert all("watermark" in r.kw_reason for r in late)
    # The invalid rows come out too, as rows, with the reason and no watermark.
    assert Counter((r.device, r.t, r.temp, r.kw_reason, r.wm) for r in invalid) == Counter(
        (k, t, v, "null key" if k is None else "null event time", None)
        for b in batches for k, t, v in b if k is None or t is None)
    assert len(invalid) == model.invalid
    # Results equal .agg(...)'s columns; the windows equal the model's.
    assert Counter((r.device, r.start, r.n) for r in results) == Counter(
        (w.key, w.start, len(w.values)) for w in model.emitted)
    # Accounting identity: aggregated + still open + late + invalid == input, every late and
    # invalid row returned as a row.
    total = sum(len(b) for b in batches)
    assert sum(r.n for r in results) + model.open_rows() + len(late) + len(invalid) == total


@pytest.mark.all_versions
def test_report_schema_and_split(spark, workdir):
    replay = Replay(spark, workdir)
    replay.add([("a", None, 1.0)])
    report = (
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="1 second")
        .window("10 seconds")
        .agg_with_report(F.count("*").alias("n"), keep_late_rows=True)
    )
    results, late = kw.split_report(report)
    assert results.columns == ["device", "window", "n"]
    assert late.columns == ["device", "ts", "temp", "kw_watermark", "kw_reason"]
    plain, none = kw.split_report(
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="1 second")
        .window("10 seconds").agg_with_report(F.count("*").alias("n")))
    assert none is None and plain.columns == ["device", "window", "n"]


def test_sliding_late_row_is_kept_once(spark, workdir):
    # S = 10 s, slide 5 s, L = 0. Batch 0: a@112 (wm 112). Batch 1: a@103 has windows
    # [95,105) and [100,110), both closed -> one late row (not two); a@108 -> into [105,115).
    batches = [[("a", 112 * SECOND, 1.0)], [("a", 103 * SECOND, 2.0), ("a", 108 * SECOND, 3.0)]]
    model = run_model(batches, 0, 10 * SECOND, 5 * SECOND)
    assert [(k, t) for _, k, t, _ in model.late_rows] == [("a", 103 * SECOND)]
    _, late, _ = run_two_sinks(spark, workdir, batches, 0, 10, 5)
    assert [(r.device, r.t, r.temp, r.wm) for r in late] == [("a", 103 * SECOND, 2.0, 112 * SECOND)]
