"""Per-key visibility (docs/semantics.md, "Per-key state" and "Per-batch metrics"), checked
against the reference model (tests/reference_model.py) on a small stream with a fast key, a
lagging key, keys that fall silent and leave state, and a key that returns:

- ``kw.read_key_state``: one row per key in state, read with Spark's state data source;
- ``kw.metrics(progress)``: the per-batch counts, from a classic progress object, from its JSON,
  and (on a real Spark Connect session) from Spark Connect's row shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from pyspark.sql import functions as F

import keyed_watermarks as kw
from policy_model import nearest_rank
from reference_model import run_model
from support import BASE, SECOND, Replay, run_to_end, ts

LATENESS_S, WINDOW_S, SKEW_S, STUCK_S = 2, 10, 15, 5


def at(seconds: float) -> int:
    return BASE + int(seconds * SECOND)


BATCHES = [
    [("fast", at(1), 1.0), ("slow", at(2), 2.0), ("gone", at(3), 3.0), ("back", at(4), 4.0)],
    [("fast", at(21), 5.0), ("slow", at(5), 6.0), ("slow", at(1), 7.0)],
    [("fast", at(41), 8.0), ("slow", at(16), 9.0), ("fast", at(30), 10.0)],
    # batch 3: the floor (E 39 - 15 = 24) closes gone's and back's windows: both leave state.
    [("fast", at(61), 11.0), ("slow", at(31), 12.0)],
    # batch 4: back returns (a row for its emitted window: late) and opens a new window.
    [("fast", at(75), 15.0), ("slow", at(44), 16.0), ("slow", at(20), 17.0), ("back", at(6), 13.0),
     ("back", at(72), 14.0)],
]


def keyed(spark, workdir, **options):
    """The BATCHES stream, replayed, with keyed watermarks and 10-second windows."""
    replay = Replay(spark, workdir)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in BATCHES])
    return (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness=f"{LATENESS_S} seconds",
                               **options)
            .window(f"{WINDOW_S} seconds"))


def run(spark, workdir):
    report = (keyed(spark, workdir, max_skew=f"{SKEW_S} seconds", stuck_after=f"{STUCK_S} seconds")
              .agg_with_report(F.count("*").alias("n")))
    query = run_to_end(report, workdir / "out", workdir / "checkpoint")
    model = run_model(BATCHES, LATENESS_S * SECOND, WINDOW_S * SECOND, max_skew=SKEW_S * SECOND)
    return report, list(query.recentProgress), model


def _batch_timestamps_ms(checkpoint):
    """Each micro-batch's processing time (the batch timestamp its operators saw), from the
    metadata line of its offset log entry."""
    return {int(f.name): json.loads(f.read_text().splitlines()[1])["batchTimestampMs"]
            for f in (checkpoint / "offsets").iterdir() if f.name.isdigit()}


def test_read_key_state_and_metrics_match_the_model(spark, workdir):
    report, progress, model = run(spark, workdir)
    # The report's schema is unchanged: the internal per-key rows feed the metrics only.
    assert "kw_key_metrics" not in report.columns
    assert {r.kw_kind for r in spark.read.parquet(str(workdir / "out")).collect()} <= {"window", "late", "watermark"}
    assert model.released and any(b.new & {"back"} for b in model.batch_keys[1:]), "the stream must churn"

    # --- kw.read_key_state: one row per key in state, as the model holds it ---
    state = kw.read_key_state(spark, str(workdir / "checkpoint"), key="device")
    assert state.columns == ["device", "watermark", "max_event_time", "open_windows", "earliest_window_start",
                             "late_rows", "attempted_regressions", "lateness", "last_batch_with_rows", "idle_since"]
    rows = {r.device: r for r in state.select(
        "device", F.unix_micros("watermark").alias("wm"), F.unix_micros("max_event_time").alias("m"),
        "open_windows", F.unix_micros("earliest_window_start").alias("earliest"), "late_rows",
        "attempted_regressions", "lateness", F.unix_millis("last_batch_with_rows").alias("last_batch_with_rows"),
        "idle_since").collect()}
    assert set(rows) == set(model.key_state)
    batch_times = _batch_timestamps_ms(workdir / "checkpoint")
    for key, want in model.key_state.items():
        got = rows[key]
        assert (got.wm, got.m, got.open_windows, got.earliest, got.late_rows, got.attempted_regressions) == (
            want.watermark, want.max_event_time, want.open_windows, want.earliest_window_start, want.late_rows,
            want.regressions), key
        assert got.lateness.total_seconds() == LATENESS_S and got.idle_since is None
        # The processing time of the key's last micro-batch with rows (its progress' timestamp).
        assert got.last_batch_with_rows == batch_times[max(b for b, batch in enumerate(BATCHES)
                                                           if any(r[0] == key for r in batch))], key
    # An earlier micro-batch: the key that left state is there.
    before = {r.device for r in kw.read_key_state(spark, str(workdir / "checkpoint"), key="device", batch_id=0)
              .collect()}
    assert before == {"fast", "slow", "gone", "back"}

    # --- kw.metrics: per micro-batch, from the progress object and from its JSON ---
    assert len(progress) == model.batches
    for p, want in zip(progress, model.batch_keys):
        got = kw.metrics(p)
        assert got == kw.metrics(json.loads(p.json))
        assert got["batch_id"] == p.batchId
        assert (got["keys_in_batch"], got["keys_with_data"], got["keys_new"], got["keys_released"],
                got["open_windows"]) == (len(want.handled), len(want.with_rows), len(want.new),
                                         len(want.released), want.open_windows), p.batchId
        assert got["state_rows"] == p.stateOperators[0].numRowsTotal
        assert got["windows_emitted"] == model.emitted_in_batch(p.batchId)
        if want.lags:
            assert (got["watermark_lag_min_s"], got["watermark_lag_max_s"]) == (
                min(want.lags) / SECOND, max(want.lags) / SECOND), p.batchId
            assert min(want.lags) / SECOND <= got["watermark_lag_p50_s"] <= got["watermark_lag_p95_s"] <= max(
                want.lags) / SECOND
            # p50 and p95 within 1/256 of the lag of that nearest rank (docs/semantics.md).
            for q, name in ((0.5, "watermark_lag_p50_s"), (0.95, "watermark_lag_p95_s")):
                exact = nearest_rank(want.lags, q) / SECOND
                assert abs(got[name] - exact) <= abs(exact) / 256 + 1e-9, (p.batchId, name, got[name], exact)
            assert got["stuck_keys"] == sum(1 for lag in want.lags if lag > STUCK_S * SECOND), p.batchId
    assert sum(kw.metrics(p)["stuck_keys"] or 0 for p in progress) > 0, "the slow key should count as stuck"
    assert [kw.metrics(p)["state_rows"] for p in progress] == _keys_in_state(model)


def test_watermark_lag_without_a_global_watermark(spark, workdir):
    """With max_skew="unbounded" there is no global watermark: a key's lag is the highest
    watermark among the batch's keys minus its own (docs/semantics.md, "Per-batch metrics")."""
    out = keyed(spark, workdir, max_skew="unbounded").agg(F.count("*").alias("n"))
    query = run_to_end(out, workdir / "out", workdir / "checkpoint")
    model = run_model(BATCHES, LATENESS_S * SECOND, WINDOW_S * SECOND, max_skew=None)
    progress = list(query.recentProgress)
    assert len(progress) == model.batches
    checked = 0
    for p, want in zip(progress, model.batch_keys):
        got = kw.metrics(p)
        assert got["stuck_keys"] is None, p.batchId
        if not want.watermarks:
            continue
        lags = [max(want.watermarks) - w for w in want.watermarks]
        assert (got["watermark_lag_min_s"], got["watermark_lag_max_s"]) == (0.0, max(lags) / SECOND), p.batchId
        assert 0.0 <= got["watermark_lag_p50_s"] <= got["watermark_lag_p95_s"] <= max(lags) / SECOND, p.batchId
        checked += 1 if max(lags) > 0 else 0
    assert checked >= 2, "the stream must have batches whose keys' watermarks differ"


PER_KEY_METRICS = {"keys_in_batch", "keys_with_data", "keys_new", "keys_released", "open_windows",
                   "duplicate_rows", "watermark_lag_min_s", "watermark_lag_p50_s", "watermark_lag_p95_s",
                   "watermark_lag_max_s", "stuck_keys"}


def test_metrics_counts_keeps_the_counts_and_the_windows(spark, workdir):
    """metrics="counts": the same windows and the same output counts per micro-batch as the
    default, without the per-key metrics (the operator emits no per-key rows for them)."""
    def run_with(name, **options):
        out = keyed(spark, workdir / name, max_skew=f"{SKEW_S} seconds", **options).agg(F.count("*").alias("n"))
        query = run_to_end(out, workdir / name / "out", workdir / name / "checkpoint")
        windows = sorted((r.device, r.window.start, r.n) for r in spark.read.parquet(str(workdir / name / "out")).collect())
        return windows, [kw.metrics(p) for p in query.recentProgress]

    full_windows, full = run_with("keys")
    counts_windows, counts = run_with("counts", metrics="counts")
    assert counts_windows == full_windows and full_windows
    assert len(counts) == len(full)
    for got, want in zip(counts, full):
        assert PER_KEY_METRICS <= set(want) and not PER_KEY_METRICS & set(got), got
        assert got == {k: v for k, v in want.items() if k not in PER_KEY_METRICS}
    assert sum(m["late_rows"] for m in counts) > 0, "the stream has late rows"

    with pytest.raises(Exception, match="metrics: expected 'keys' or 'counts', got 'all'"):
        keyed(spark, workdir / "bad", metrics="all")


def _keys_in_state(model):
    """Keys in state after each micro-batch, from the model's new and released keys."""
    keys, out = set(), []
    for b in model.batch_keys:
        keys = (keys | b.new) - b.released
        out.append(len(keys))
    return out


CONNECT_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    from pyspark.sql import SparkSession, functions as F
    import keyed_watermarks as kw

    # keyed_watermark refuses Spark Connect sessions; what is checked here is that kw.metrics
    # reads Spark Connect's progress shape (observed metrics as Row(values=[...], schema=...)).
    spark = SparkSession.builder.remote("local[1]").getOrCreate()
    events = spark.readStream.format("rate").option("rowsPerSecond", 10).load()
    observed = events.observe("keyed_watermarks_output", F.count(F.lit(1)).alias("windows_emitted"),
                              F.max("value").alias("late_rows"))
    query = observed.writeStream.format("noop").option("checkpointLocation", sys.argv[1]).start()
    for _ in range(240):
        done = [p for p in query.recentProgress if p.numInputRows > 0]
        if done:
            break
        time.sleep(0.5)
    p = done[0]
    row = p.observedMetrics["keyed_watermarks_output"]
    print("SHAPE", sorted(row.__fields__))
    print("METRICS", json.dumps(kw.metrics(p)))
    print("INPUT", p.numInputRows, p.batchId)
    query.stop()
    spark.stop()
    """
)


@pytest.mark.slow
def test_metrics_reads_spark_connect_progress(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CONNECT_SCRIPT, str(tmp_path / "checkpoint")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.split(" ", 1)[0] in
                 ("SHAPE", "METRICS", "INPUT"))
    assert lines["SHAPE"] == "['schema', 'values']"  # Spark Connect's shape, not the classic Row
    metrics = json.loads(lines["METRICS"])
    rows, batch_id = (int(x) for x in lines["INPUT"].split())
    assert metrics["batch_id"] == batch_id and metrics["windows_emitted"] == rows
    assert metrics["late_rows"] is not None and "state_rows" not in metrics

