"""Report rows ("late", "watermark", ...) leave the result columns null, so the operator
declares them nullable, also `window` and `count`, which groupBy().agg() declares non-null
(and agg() still does). Declared non-null, Spark 4.0-4.2's row encoders failed every report
row with EXPRESSION_DECODING_FAILED (a null `window` struct); 4.3's let them through."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

import keyed_watermarks as kw
from support import SECOND, Replay, run_to_end, ts

pytestmark = pytest.mark.all_versions


def _report(replay):
    return (kw.keyed_watermark(replay.stream(), key=["site", "device", "sensor"], event_time="ts",
                               lateness="2 seconds")
            .window("5 seconds")
            .agg_with_report(F.count("*").alias("n"), F.sum("temp").alias("total")))


def test_report_rows_have_nullable_result_columns_and_filters_on_them_hold(spark, workdir):
    replay = Replay(spark, workdir, "site STRING, device STRING, sensor STRING, ts TIMESTAMP, temp DOUBLE")
    keys = [(s, d, x) for s in ("s1", "s2") for d in ("a", "b") for x in ("p", "q")]
    # Three batches moving every key to 16 s, then a row at 1 s: its window [0, 5) closed.
    for b in range(3):
        replay.add([k + (ts((7 * b + i) * SECOND), float(i)) for k in keys for i in range(5)])
    replay.add([("s1", "a", "p", ts(1 * SECOND), 99.0)])
    report = _report(replay)
    nullable = {f.name: f.nullable for f in report.schema}
    assert nullable["window"] and nullable["n"]
    run_to_end(report, workdir / "all", workdir / "all-cp")
    everything = spark.read.schema(report.schema).parquet(str(workdir / "all")).collect()
    expected = sorted((r.kw_kind, r.device, r.kw_late_rows) for r in everything if r.window is None)
    assert ("late", "a", 1) in expected
    # Spark's own filter on the null window finds exactly those rows.
    filtered = report.where(F.col("window").isNull())
    run_to_end(filtered, workdir / "null-window", workdir / "null-window-cp")
    got = spark.read.schema(report.schema).parquet(str(workdir / "null-window")).collect()
    assert sorted((r.kw_kind, r.device, r.kw_late_rows) for r in got) == expected
    # The window rows equal agg()'s, which keeps groupBy().agg()'s non-null columns.
    agg = (kw.keyed_watermark(replay.stream(), key=["site", "device", "sensor"], event_time="ts",
                              lateness="2 seconds").window("5 seconds")
           .agg(F.count("*").alias("n"), F.sum("temp").alias("total")))
    native = replay.stream().groupBy("site", "device", "sensor", F.window("ts", "5 seconds")).agg(
        F.count("*").alias("n"), F.sum("temp").alias("total"))
    assert [(f.name, f.nullable) for f in agg.schema] == [(f.name, f.nullable) for f in native.schema]
    run_to_end(agg, workdir / "agg", workdir / "agg-cp")
    windows = spark.read.schema(agg.schema).parquet(str(workdir / "agg")).collect()
    assert sorted(windows) == sorted(r[: len(agg.columns)] for r in everything if r.kw_kind == "window")
