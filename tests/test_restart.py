"""Restart from a checkpoint (docs/semantics.md, "State and restarts"): a query stopped after
half of the micro-batches and restarted from its checkpoint produces the same output as an
uninterrupted run over the same micro-batches, including windows whose rows span the restart
(their aggregation buffers come back from the state store)."""

from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F

import keyed_watermarks as kw
from reference_model import run_model
from support import SECOND, Replay, four_device_batches, run_available, ts

LATENESS_S, WINDOW_S = 5, 10
HALF = 4  # of four_device_batches' 8 micro-batches


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


# Not all_versions: every older line resumes checkpoints in test_spark_upgrades (4.0 -> 4.1 ->
# 4.2 -> 4.3 and back to 4.0, tumbling, sliding, sessions and timers, against an uninterrupted
# run), the same check across lines, so this one runs on the main line.
def test_restart_from_checkpoint_matches_uninterrupted_run(spark, workdir):
    batches = four_device_batches()
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
    batches = four_device_batches(3)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches[:2]])

    def run(*aggs):
        df = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="5 seconds")
              .window("10 seconds").agg(*aggs))
        return run_available(df, workdir / "out", workdir / "checkpoint")

    run(F.count("*").alias("n"))
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches[2:4]])
    with pytest.raises(Exception, match="restart it from a new checkpoint location"):
        run(F.count("*").alias("n"), F.max("temp").alias("hottest"))


@pytest.mark.parametrize("first, second", [
    (lambda wm: wm.window("10 seconds"), lambda wm: wm.window("20 seconds")),
    (lambda wm: wm.window("10 seconds", slide="5 seconds"), lambda wm: wm.window("10 seconds", slide="2 seconds")),
    (lambda wm: wm.session("10 seconds"), lambda wm: wm.session(F.lit("10 seconds"))),
], ids=["size", "slide", "session-gap-kind"])
def test_restart_with_another_window_spec_is_refused(spark, workdir, first, second):
    # Stored windows are found by their start: after 10 s -> 20 s a row was merged into a
    # stored 10-second window. A restart with another window spec must fail, naming it.
    replay = Replay(spark, workdir)
    batches = four_device_batches(5)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches[:2]])

    def run(windows):
        wm = kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="5 seconds")
        return run_available(windows(wm).agg(F.count("*").alias("n")), workdir / "out", workdir / "checkpoint")

    run(first)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in batches[2:4]])
    with pytest.raises(Exception, match="another window spec .* restart it from a new checkpoint location"):
        run(second)
