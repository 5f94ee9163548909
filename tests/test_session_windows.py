"""Session windows per key against Spark's own ``groupBy(key, session_window(ts, gap))``:
over random multi-key streams and batch splits, every emitted session equals Spark's batch
session over the rows docs/semantics.md calls on time, and exactly the sessions whose end the
key's final watermark passed are emitted."""

from __future__ import annotations

import random
import uuid

import pytest
from pyspark.sql import functions as F

import keyed_watermarks as kw
from support import SECOND, Replay, run_to_end, ts

GAP_S = 10
LATENESS_S = 5


def random_stream(seed: int):
    rng = random.Random(seed)
    batches = []
    clocks = {k: rng.randint(0, 30) * SECOND for k in ("a", "b", "c")}
    for _ in range(rng.randint(3, 6)):
        rows = []
        for _ in range(rng.randint(3, 10)):
            k = rng.choice(list(clocks))
            clocks[k] += rng.choice([0, 1, 2, 3, 4, 6, 9, 12, 25]) * SECOND + rng.choice([0, 1, SECOND // 2])
            t = clocks[k] - rng.choice([0, 0, 0, 4, 12, 30]) * SECOND  # sometimes behind
            rows.append((k, t, float(rng.randint(0, 20))))
        batches.append(rows)
    return batches


def dense_stream(seed: int):
    """Dozens of rows per key and batch at distinct event times (many partials of one key in
    one input partition), forming several sessions per key."""
    rng = random.Random(seed)
    batches, clocks = [], {"a": 0, "b": 0}
    for _ in range(3):
        rows = []
        for k in clocks:
            for _ in range(rng.randint(30, 50)):
                clocks[k] += rng.choice([1, 2, 3, 15]) * SECOND + rng.randint(1, SECOND - 1)
                rows.append((k, clocks[k] - rng.choice([0, 0, 2 * SECOND]), float(rng.randint(0, 20))))
        rng.shuffle(rows)
        batches.append(rows)
    return batches


def on_time_rows(batches):
    """docs/semantics.md for sessions: a row is late when t <= wm(k) at the start of its batch."""
    max_t, keep, late = {}, [], 0
    for rows in batches:
        wm = {k: m - LATENESS_S * SECOND for k, m in max_t.items()}
        for k, t, v in rows:
            if k in wm and t <= wm[k]:
                late += 1
            else:
                keep.append((k, t, v))
        for k, t, _ in rows:
            max_t[k] = max(t, max_t.get(k, t))
    return keep, late, {k: m - LATENESS_S * SECOND for k, m in max_t.items()}


def gap_column():
    """A per-row gap, as session_window allows: long sessions for hot readings."""
    return F.when(F.col("temp") > 10, "12 seconds").otherwise("4 seconds")


@pytest.mark.parametrize("seed, per_row_gap, dense", [pytest.param(1, False, False, marks=pytest.mark.all_versions),
                                                      (2, False, False), (3, False, False), (4, False, False),
                                                      pytest.param(5, True, False, marks=pytest.mark.all_versions),
                                                      (6, True, False), (7, False, True)])
def test_sessions_equal_spark_session_window(spark, tmp_path_factory, seed, per_row_gap, dense):
    batches = dense_stream(seed) if dense else random_stream(seed)
    root = tmp_path_factory.mktemp(f"session-{uuid.uuid4().hex[:8]}")
    replay = Replay(spark, root)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches])
    aggs = [F.count("*").alias("n"), F.sum("temp").alias("s"), F.max("ts").alias("last")]
    df = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness=f"{LATENESS_S} seconds")
          .session(gap_column() if per_row_gap else f"{GAP_S} seconds").agg_with_report(*aggs))
    run_to_end(df, root / "out", root / "checkpoint")
    out = spark.read.schema(df.schema).parquet(str(root / "out"))
    ours = {(r.device, r.start, r.end): (r.n, r.s) for r in out.where("kw_kind = 'window'").select(
        "device", F.unix_micros("session_window.start").alias("start"),
        F.unix_micros("session_window.end").alias("end"), "n", "s").collect()}
    late = sum(r.kw_late_rows for r in out.where("kw_kind = 'late'").collect())

    keep, want_late, final_wm = on_time_rows(batches)
    batch_df = spark.createDataFrame([(k, ts(t), v) for k, t, v in keep], "device STRING, ts TIMESTAMP, temp DOUBLE")
    gap = gap_column() if per_row_gap else f"{GAP_S} seconds"
    expected = batch_df.groupBy("device", F.session_window("ts", gap)).agg(*aggs).select(
        "device", F.unix_micros("session_window.start").alias("start"),
        F.unix_micros("session_window.end").alias("end"), "n", "s").collect()
    closed = {(r.device, r.start, r.end): (r.n, r.s) for r in expected if r.end <= final_wm[r.device]}
    assert ours == closed
    assert late == want_late
    assert len(ours) >= 2
    # Result columns are Spark's.
    assert kw.split_report(df)[0].columns == ["device", "session_window", "n", "s", "last"]


def test_session_merges_across_batches_and_bridges(spark, workdir):
    # gap 10 s, lateness 0. Batch 0: a@0 -> [0,10); a@30 -> [30,40). wm(a) = 30: [0,10) is
    # emitted (end 10 <= 30). Batch 1: a@35 (> wm 30, on time) extends [30,40) to [30,45).
    # Batch 2: a@60: wm 60 -> [30,45) emitted with 2 rows.
    batches = [[("a", 0, 1.0), ("a", 30 * SECOND, 2.0)], [("a", 35 * SECOND, 4.0)], [("a", 60 * SECOND, 8.0)]]
    replay = Replay(spark, workdir)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches])
    df = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="0 seconds")
          .session("10 seconds").agg(F.count("*").alias("n"), F.sum("temp").alias("s")))
    run_to_end(df, workdir / "out", workdir / "checkpoint")
    rows = spark.read.schema(df.schema).parquet(str(workdir / "out")).select(
        F.unix_micros("session_window.start").alias("start"), F.unix_micros("session_window.end").alias("end"),
        "n", "s").collect()
    assert sorted((r.start // SECOND, r.end // SECOND, r.n, r.s) for r in rows) == [(0, 10, 1, 1.0), (30, 45, 2, 6.0)]


def test_session_allowed_lateness_fires_revisions(spark, workdir):
    # gap 10 s, lateness 0, allowed lateness 25 s. Batch 0: a@0 -> [0,10), a@30 -> [30,40);
    # wm 30: [0,10) fires revision 0. Batch 1: a@8 is on time (8 > 30 - 25) and merges into
    # [0,10) -> [0,18), which is due and changed: revision 1. Batch 2: a@60 -> wm 60: [0,18)
    # expires (18 + 25 <= 60), [30,40) fires revision 0; [60,70) stays open.
    batches = [[("a", 0, 1.0), ("a", 30 * SECOND, 2.0)], [("a", 8 * SECOND, 4.0)], [("a", 60 * SECOND, 8.0)]]
    replay = Replay(spark, workdir)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches])
    aggs = [F.count("*").alias("n"), F.sum("temp").alias("s")]
    df = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="0 seconds")
          .session("10 seconds", allowed_lateness="25 seconds").agg(*aggs))
    assert df.columns == ["device", "session_window", "n", "s", "revision"]
    run_to_end(df, workdir / "out", workdir / "checkpoint")
    rows = spark.read.schema(df.schema).parquet(str(workdir / "out")).select(
        F.unix_micros("session_window.start").alias("start"), F.unix_micros("session_window.end").alias("end"),
        "n", "s", "revision").collect()
    got = sorted((r.start // SECOND, r.end // SECOND, r.n, r.s, r.revision) for r in rows)
    assert got == [(0, 10, 1, 1.0, 0), (0, 18, 2, 5.0, 1), (30, 40, 1, 2.0, 0)]
    # The last revision of each session equals Spark's batch session_window over all its rows.
    batch = spark.createDataFrame([(k, ts(t), v) for b in batches for k, t, v in b],
                                  "device STRING, ts TIMESTAMP, temp DOUBLE")
    spark_sessions = {(r.start // SECOND, r.end // SECOND): (r.n, r.s) for r in batch.groupBy(
        "device", F.session_window("ts", "10 seconds")).agg(*aggs).select(
        F.unix_micros("session_window.start").alias("start"), F.unix_micros("session_window.end").alias("end"),
        "n", "s").collect()}
    last = {}
    for start, end, n, s, rev in got:
        last[start] = (end, n, s, rev)
    assert {(start, end): (n, s) for start, (end, n, s, _) in last.items()} == {
        k: v for k, v in spark_sessions.items() if k != (60, 70)}


def test_session_gap_column_must_hold_durations(spark, workdir):
    from pyspark.errors import IllegalArgumentException

    stream = Replay(spark, workdir).stream()
    keyed = kw.keyed_watermark(stream, key="device", event_time="ts", lateness="1 second")
    with pytest.raises(IllegalArgumentException, match="gap"):
        keyed.session(F.col("temp"))
    with pytest.raises(IllegalArgumentException, match="allowed_lateness"):
        keyed.session("10 seconds", allowed_lateness="-1 second")
