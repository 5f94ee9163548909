"""The input counts in ``observedMetrics["keyed_watermarks_input"]``: every reason a row is not
aggregated, each row counted once (the first reason that applies), summed over several input
partitions of one micro-batch."""

from __future__ import annotations

import os
from datetime import datetime, timezone

from pyspark.sql import functions as F

import keyed_watermarks as kw
from support import run_to_end

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, gw STRING, gap STRING, lat STRING"
FUTURE = datetime(9999, 1, 1, tzinfo=timezone.utc)  # beyond max_ahead (a day) of processing time


def _ts(s: int) -> datetime:
    return datetime.fromtimestamp(1_700_000_000 + s, tz=timezone.utc)


def reason(row) -> str:
    """The first reason, in the documented order, that a row is not aggregated ('' if valid)."""
    device, ts, _, gw, gap, lat = row
    if device is None:
        return "null_key_rows"
    if ts is None:
        return "null_event_time_rows"
    if gw is None:
        return "null_source_rows"
    if gap is None or gap.startswith("-") or gap.startswith("0 "):
        return "invalid_gap_rows"
    if lat is not None and (lat.startswith("-") or not lat[0].isdigit()):
        return "invalid_lateness_rows"
    if ts == FUTURE:
        return "future_event_time_rows"
    return ""


def test_input_counts_for_every_reason_across_partitions(spark, workdir):
    files = [
        [("a", _ts(1), 1.0, "g1", "5 seconds", None), (None, _ts(2), 2.0, "g1", "5 seconds", "x"),
         (None, None, 2.5, None, None, None), ("b", None, 3.0, "g1", "5 seconds", None),
         ("c", _ts(3), 4.0, None, "5 seconds", "-1 second"), ("d", _ts(4), 5.0, "g1", None, None),
         ("e", _ts(5), 6.0, "g2", "-1 seconds", None), ("g", _ts(6), 1.0, "g1", "5 seconds", "abc"),
         ("h", FUTURE, 1.0, "g1", "5 seconds", "2 seconds")],
        [("a", _ts(2), 7.0, "g2", "5 seconds", "3 seconds"), (None, _ts(6), 8.0, "g2", "5 seconds", None),
         ("c", _ts(7), 9.0, None, "5 seconds", None), ("f", _ts(8), 1.5, "g1", "0 seconds", None),
         ("b", _ts(9), 2.5, "g1", "2 seconds", None), ("g", _ts(10), 1.0, "g2", "5 seconds", "-3 seconds"),
         ("h", FUTURE, 1.0, "g1", "1 second", "abc")],
    ]
    input_dir = workdir / "input"
    for i, rows in enumerate(files):
        tmp = workdir / f"tmp-{i}"
        spark.createDataFrame(rows, SCHEMA).coalesce(1).write.parquet(str(tmp))
        (part,) = [p for p in tmp.iterdir() if p.name.endswith(".parquet")]
        input_dir.mkdir(exist_ok=True)
        target = input_dir / f"part-{i}.parquet"
        part.rename(target)
        os.utime(target, (1_000_000 + i, 1_000_000 + i))
    # Both files in one micro-batch: two input partitions, each with its own invalid rows.
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).parquet(str(input_dir))
    result = (
        kw.keyed_watermark(events, key="device", event_time="ts", lateness="1 second", source="gw",
                           key_lateness=F.col("lat"))
        .session(F.col("gap"))
        .agg(F.count("*").alias("n"))
    )
    query = run_to_end(result, workdir / "out", workdir / "checkpoint")

    (progress,) = [p for p in query.recentProgress if p.numInputRows > 0]
    assert progress.numInputRows == 16
    got = progress.observedMetrics["keyed_watermarks_input"].asDict()
    all_rows = [r for rows in files for r in rows]
    want = {name: sum(1 for r in all_rows if reason(r) == name)
            for name in ("null_key_rows", "null_event_time_rows", "null_source_rows", "invalid_gap_rows",
                         "invalid_lateness_rows", "future_event_time_rows")}
    want["input_rows"] = len(all_rows)
    assert want == {"input_rows": 16, "null_key_rows": 3, "null_event_time_rows": 1,
                    "null_source_rows": 2, "invalid_gap_rows": 3, "invalid_lateness_rows": 3,
                    "future_event_time_rows": 1}
    assert got == want
