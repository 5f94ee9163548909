"""Sessions with a per-row gap and allowed lateness against Spark's batch ``session_window``.

Over random multi-key streams and batch splits (one query per example, late rows kept):
- the rows docs/semantics.md calls on time, late and invalid are computed here from the
  contract alone (late: ``t <= wm(k) - A`` at the start of the batch; invalid: null key, null
  time, or a gap session_window drops);
- every session Spark's batch ``groupBy(key, session_window(ts, gap))`` forms over the on-time
  rows and whose end the key's final watermark passed was emitted by us with Spark's bounds and
  values, as the highest revision among our firings within its bounds (earlier revisions and
  merged parts are superseded, never the other way round);
- every firing of ours lies within one of Spark's sessions (sessions only grow);
- every late and invalid row comes back as a row, and on-time + late + invalid = input.
"""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict

from hypothesis import given, note
from hypothesis import strategies as st
from pyspark.sql import functions as F

import keyed_watermarks as kw
from support import (
    EVENT_SCHEMA, SECOND, Replay, packed_streams, per_row_gap, run_to_end, spark_examples, to_spark_rows,
)


def gap_column():
    # The Spark twin of test_reference_model.per_row_gap: null temp -> null gap, negative -> 0.
    return (F.when(F.col("temp") > 20, "10 seconds").when(F.col("temp") >= 0, "3 seconds")
            .when(F.col("temp") < 0, "0 seconds"))


def classify(batches, lateness, allowed):
    """(on-time rows, late rows, invalid rows, final watermark per key), per the contract."""
    max_t, on_time, late, invalid = {}, [], [], []
    for rows in batches:
        wm = {k: m - lateness for k, m in max_t.items()}
        for k, t, v in rows:
            gap = per_row_gap(v)
            if k is None or t is None or gap is None or gap <= 0:
                invalid.append((k, t, v))
                continue
            (late if k in wm and t <= wm[k] - allowed else on_time).append((k, t, v))
            max_t[k] = max(t, max_t.get(k, t))
    return on_time, late, invalid, {k: m - lateness for k, m in max_t.items()}


@spark_examples(4)
@given(batches=packed_streams(), lateness_s=st.sampled_from([0, 5]), allowed_s=st.sampled_from([3, 10, 30]))
def test_last_revisions_equal_spark_sessions(spark, tmp_path_factory, batches, lateness_s, allowed_s):
    on_time, late, invalid, final_wm = classify(batches, lateness_s * SECOND, allowed_s * SECOND)
    note(f"lateness={lateness_s}s allowed={allowed_s}s batches={batches}")
    root = tmp_path_factory.mktemp(f"session-rev-{uuid.uuid4().hex[:8]}")
    replay = Replay(spark, root)
    replay.add_all(to_spark_rows(batches))
    aggs = [F.count("*").alias("n"), F.sum("temp").alias("s")]
    df = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness=f"{lateness_s} seconds")
          .session(gap_column(), allowed_lateness=f"{allowed_s} seconds")
          .agg_with_report(*aggs, keep_late_rows=True))
    run_to_end(df, root / "out", root / "checkpoint")
    out = spark.read.schema(df.schema).parquet(str(root / "out")).select(
        "device", "kw_kind", "revision", "n", "s", "kw_reason",
        F.unix_micros("session_window.start").alias("start"), F.unix_micros("session_window.end").alias("end"),
        F.col("kw_late_row.device").alias("row_key"), F.unix_micros("kw_late_row.ts").alias("row_t"),
        F.col("kw_late_row.temp").alias("row_v")).collect()

    expected = spark.createDataFrame(to_spark_rows([on_time])[0] if on_time else [], EVENT_SCHEMA) \
        .groupBy("device", F.session_window("ts", gap_column())).agg(*aggs) \
        .select("device", F.unix_micros("session_window.start").alias("start"),
                F.unix_micros("session_window.end").alias("end"), "n", "s").collect()
    firings = defaultdict(list)  # key -> [(start, end, revision, n, s)]
    for r in out:
        if r.kw_kind == "window":
            firings[r.device].append((r.start, r.end, r.revision, r.n, r.s))
    for key, fs in firings.items():
        for start, end, *_ in fs:
            assert any(e.device == key and e.start <= start and end <= e.end for e in expected), (key, start, end)
    for e in expected:
        if e.end > final_wm[e.device]:
            continue
        within = [f for f in firings[e.device] if e.start <= f[0] and f[1] <= e.end]
        assert within, f"session {e} was never emitted"
        top = max(within, key=lambda f: f[2])
        assert (top[0], top[1], top[3], top[4]) == (e.start, e.end, e.n, e.s)
        assert sum(1 for f in within if f[2] == top[2]) == 1

    # Late and invalid rows come back as rows; with the on-time rows they are the input.
    got_late = Counter((r.row_key, r.row_t, r.row_v) for r in out if r.kw_kind == "late_row")
    got_invalid = Counter((r.row_key, r.row_t, r.row_v) for r in out if r.kw_kind == "invalid_row")
    assert got_late == Counter(late)
    assert got_invalid == Counter(invalid)
    assert sum(r.n for r in expected) + sum(got_late.values()) + sum(got_invalid.values()) == sum(map(len, batches))
    reasons = {r.kw_reason for r in out if r.kw_kind == "invalid_row" and r.row_key is not None and r.row_t is not None}
    assert reasons <= {"null or non-positive session gap"}
