"""Restart from a checkpoint (docs/semantics.md, "State and restarts"): a query stopped after
half of the micro-batches and restarted from its checkpoint produces the same output as an
uninterrupted run over the same micro-batches, including windows whose rows span the restart
(their aggregation buffers come back from the state store)."""

from __future__ import annotations

import datetime
import random
from collections import Counter
from typing import List

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F

import keyed_watermarks as kw
from conftest import Replay, run_available
from reference_model import run_model

SECOND = 1_000_000
BASE = 1_704_067_200 * SECOND  # 2024-01-01T00:00:00Z
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
LATENESS_S, WINDOW_S = 5, 10
N_BATCHES, HALF = 8, 4


def ts(micros):
    return None if micros is None else EPOCH + datetime.timedelta(microseconds=micros)


def make_batches(seed: int = 7) -> List[List[tuple]]:
    """4 devices at different speeds; out-of-order rows, some late rows, a few invalid rows.
    Rows are (key, micros|None, temp)."""
    rng = random.Random(seed)
    speeds = {"d0": 2, "d1": 3, "d2": 1, "d3": 6}  # seconds per row, on average
    clock = {d: BASE for d in speeds}
    batches = []
    for _ in range(N_BATCHES):
        rows = []
        for _ in range(14):
            d = rng.choice(sorted(speeds))
            clock[d] += rng.randint(0, 2 * speeds[d]) * SECOND
            t = clock[d] - (rng.randint(0, 20) * SECOND if rng.random() < 0.2 else 0)
            rows.append((d, t, float(rng.randint(0, 40)) / 2))  # halves: sums and avgs exact
        rows.append((None, clock["d0"], 1.0))
        if rng.random() < 0.5:
            rows.append(("d1", None, 1.0))
        batches.append(rows)
    return batches


def query(replay: Replay):
    return (
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts",
                           lateness=f"{LATENESS_S} seconds")
        .window(f"{WINDOW_S} seconds")
        .agg_with_report(
            F.count("*").alias("n"),
            F.sum("temp").alias("s"),
            F.avg("temp").alias("mean"),
            F.percentile_approx("temp", 0.5).alias("median"),
        )
    )


def as_multiset(rows) -> Counter:
    """Rows as a multiset of hashable tuples (the window struct becomes (start, end))."""
    return Counter(tuple(tuple(v) if isinstance(v, Row) else v for v in r) for r in rows)


@pytest.mark.all_versions
def test_restart_from_checkpoint_matches_uninterrupted_run(spark, workdir):
    batches = make_batches()
    spark_batches = [[(k, ts(t), v) for k, t, v in b] for b in batches]

    # Uninterrupted: all files present, one availableNow run.
    full = Replay(spark, workdir / "full")
    full.add_all(spark_batches)
    expected = run_available(query(full), workdir / "full" / "out", workdir / "full" / "ckpt")

    # Interrupted: first half, stop, second half, restart with the same checkpoint and sink.
    part = Replay(spark, workdir / "part")
    part.add_all(spark_batches[:HALF])
    out, ckpt = workdir / "part" / "out", workdir / "part" / "ckpt"
    first = run_available(query(part), out, ckpt)
    part.add_all(spark_batches[HALF:])
    final = run_available(query(part), out, ckpt)

    assert as_multiset(final) == as_multiset(expected)

    # Non-trivial, and checked against the reference model. Values are (batch, temp) so the
    # model tells which emitted windows hold rows from both sides of the restart.
    model = run_model(
        [[(k, t, (i, v)) for k, t, v in b] for i, b in enumerate(batches)],
        LATENESS_S * SECOND, WINDOW_S * SECOND)

    def window_rows(out_dir):
        # Window starts as micros, read back with Spark: independent of the local time zone.
        return Counter(
            (r.device, r.start, r.n, r.s)
            for r in spark.read.parquet(str(out_dir)).where("kw_kind = 'window'")
            .select("device", F.unix_micros("window.start").alias("start"), "n", "s").collect())

    def model_rows(windows):
        return Counter((w.key, w.start, len(w.values), sum(v for _, v in w.values)) for w in windows)

    assert window_rows(out) == model_rows(model.emitted)
    assert window_rows(workdir / "full" / "out") == model_rows(model.emitted)
    assert sum(1 for r in first if r.kw_kind == "window") == sum(
        1 for w in model.emitted if w.batch < HALF)
    late = Counter()
    for r in final:
        if r.kw_kind == "late":
            late[r.device] += r.kw_late_rows
    assert dict(late) == model.late_per_key()

    spanning = [w for w in model.emitted
                if w.batch >= HALF and min(b for b, _ in w.values) < HALF]
    assert len(model.emitted) >= 10
    assert len(spanning) >= 2, "no window carried state across the restart"
    assert model.late_per_key(), "the stream should have late rows"
    # The restarted run emits exactly the model's windows of batches >= HALF.
    assert len(final) - len(first) == sum(1 for w in model.emitted if w.batch >= HALF) + sum(
        1 for (b, _) in model.late if b >= HALF)



def test_restart_with_other_aggregates_is_refused(spark, workdir):
    # The open windows are stored as bytes Spark's state-schema check cannot look into: a
    # restart whose aggregates differ must fail with a clear error, not misread the buffers.
    replay = Replay(spark, workdir)
    batches = make_batches(3)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches[:2]])

    def run(*aggs):
        df = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="5 seconds")
              .window("10 seconds").agg(*aggs))
        return run_available(df, workdir / "out", workdir / "checkpoint")

    run(F.count("*").alias("n"))
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches[2:4]])
    with pytest.raises(Exception, match="restart it from a new checkpoint location"):
        run(F.count("*").alias("n"), F.max("temp").alias("hottest"))
