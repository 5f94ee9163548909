"""Allowed lateness: windows stay in state `allowed_lateness` past their end and fire again
(revision 1, 2, ...) when late rows within that horizon update them; compared with the
reference model over random streams, tumbling and sliding."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from pyspark.sql import functions as F

import keyed_watermarks as kw
from reference_model import run_model
from support import LATENESS_CHOICES_S, SECOND, Replay, packed_streams, run_to_end, spark_examples, to_spark_rows


def run(spark, root, batches, lateness_s, window_s, slide_s, allowed_s):
    replay = Replay(spark, root)
    replay.add_all(to_spark_rows(batches))
    df = (
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness=f"{lateness_s} seconds")
        .window(f"{window_s} seconds", slide=None if slide_s is None else f"{slide_s} seconds",
                allowed_lateness=f"{allowed_s} seconds")
        .agg_with_report(F.count("*").alias("n"), F.sum("temp").alias("s"))
    )
    query = run_to_end(df, root / "out", root / "checkpoint")
    rows = spark.read.schema(df.schema).parquet(str(root / "out")).select(
        "device", F.unix_micros("window.start").alias("start"), "revision", "n", "s", "kw_kind",
        "kw_late_rows").collect()
    return rows, list(query.recentProgress), df


@spark_examples(6)
@given(
    batches=packed_streams(),
    lateness_s=st.sampled_from(LATENESS_CHOICES_S),
    shape=st.sampled_from([(5, None), (10, None), (10, 5)]),
    allowed_s=st.sampled_from([0, 3, 10, 30]),
)
def test_revisions_match_reference_model(spark, tmp_path_factory, batches, lateness_s, shape, allowed_s):
    window_s, slide_s = shape
    model = run_model(batches, lateness_s * SECOND, window_s * SECOND,
                      None if slide_s is None else slide_s * SECOND, allowed_s * SECOND)
    note(f"lateness={lateness_s}s window={window_s}s slide={slide_s} allowed={allowed_s}s batches={batches}")
    note(f"model={model}")
    root = tmp_path_factory.mktemp(f"allowed-{uuid.uuid4().hex[:8]}")
    rows, progress, _ = run(spark, root, batches, lateness_s, window_s, slide_s, allowed_s)

    def sums(values):
        present = [v for v in values if v is not None]
        return len(values), (float(sum(present)) if present else None)

    got = Counter((r.device, r.start, r.revision) + (r.n, r.s) for r in rows if r.kw_kind == "window")
    want = Counter((w.key, w.start, w.revision) + sums(w.values) for w in model.emitted)
    assert got == want
    # Revisions of a window are emitted in order, one per batch at most; and the per-batch
    # emission counts (first and late firings) match.
    for p in progress:
        b = p.batchId
        assert p.observedMetrics["keyed_watermarks_output"]["windows_emitted"] == (
            model.emitted_in_batch(b) if b < len(batches) else 0)
        assert p.observedMetrics["keyed_watermarks_output"]["late_rows"] == (
            model.late_in_batch(b) if b < len(batches) else 0)
    by_window = {}
    for w in model.emitted:
        by_window.setdefault((w.key, w.start), []).append((w.batch, w.revision))
    for firings in by_window.values():
        assert [r for _, r in sorted(firings)] == list(range(len(firings)))
        assert len({b for b, _ in firings}) == len(firings)


def test_late_firing_hand_computed(spark, workdir):
    # L = 0, S = 10 s, allowed 10 s. t in seconds (x SECOND).
    batches = [
        [("a", 3 * SECOND, 1.0), ("a", 12 * SECOND, 2.0)],  # wm 12: [0,10) fires rev 0 {1}
        [("a", 5 * SECOND, 4.0)],    # [0,10): 10 + 10 > 12, within horizon -> rev 1 {1, 4}
        [("a", 25 * SECOND, 8.0)],   # wm 25: [0,10) expires (20 <= 25); [10,20) fires rev 0 {2}
        [("a", 7 * SECOND, 16.0)],   # [0,10) expired -> late; [10,20) stays until wm >= 30
    ]
    model = run_model(batches, 0, 10 * SECOND, None, 10 * SECOND)
    assert [(w.start // SECOND, w.revision, w.batch, w.values) for w in model.emitted] == [
        (0, 0, 0, (1.0,)), (0, 1, 1, (1.0, 4.0)), (10, 0, 2, (2.0,))]
    assert model.late == {(3, "a"): 1}
    rows, _, df = run(spark, workdir, batches, 0, 10, None, 10)
    assert "revision" in df.columns
    got = sorted((r.start // SECOND, r.revision, r.n, r.s) for r in rows if r.kw_kind == "window")
    assert got == [(0, 0, 1, 1.0), (0, 1, 2, 5.0), (10, 0, 1, 2.0)]
    assert sum(r.kw_late_rows for r in rows if r.kw_kind == "late") == 1


def test_agg_schema_gains_revision_only_with_allowed_lateness(spark, workdir):
    replay = Replay(spark, workdir)
    replay.add([("a", None, 1.0)])
    base = kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="1 second")
    assert base.window("10 seconds").agg(F.count("*").alias("n")).columns == ["device", "window", "n"]
    assert base.window("10 seconds", allowed_lateness="1 minute").agg(F.count("*").alias("n")).columns == [
        "device", "window", "n", "revision"]
    from pyspark.errors import IllegalArgumentException
    with pytest.raises(IllegalArgumentException, match="allowed_lateness: must not be negative"):
        base.window("10 seconds", allowed_lateness="-1 second")
