"""Panes end to end (docs/semantics.md, "Panes and accumulation"): early firings every batch
with closing='global' against Spark's own streaming aggregation in update mode, output modes,
and the option's errors. The rules per case are in tests/test_emit_in_memory.py."""

from __future__ import annotations

from collections import defaultdict

import pytest
from pyspark.errors import IllegalArgumentException
from pyspark.sql import functions as F

import keyed_watermarks as kw
from reference_model import run_session_model
from support import BASE, SECOND, Replay, ts

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"


def at(s):
    return BASE + s * SECOND


# Late rows are late by both engines' rules (Spark checks them against the watermark one batch
# older than ours: docs/semantics.md, "How this differs from Spark's global watermark").
BATCHES = [
    [("fast", at(1), 1.0), ("slow", at(2), 2.0)],
    [("fast", at(25), 3.0), ("slow", at(4), 4.0), ("slow", at(12), 5.0)],
    [("fast", at(27), 13.0), ("slow", at(21), 6.0)],
    [("fast", at(41), 6.0), ("slow", at(22), 7.0)],
    [("fast", at(63), 8.0), ("slow", at(3), 9.0), ("slow", at(61), 10.0)],
    [("slow", at(14), 11.0), ("fast", at(70), 12.0), ("fast", at(64), 1.0)],
]


def run_update(df, root):
    """Runs `df` in update mode to the end of its input; returns batch id -> rows."""
    per_batch = defaultdict(list)

    def collect(batch, batch_id):
        per_batch[batch_id].extend(batch.collect())

    query = (df.writeStream.outputMode("update").foreachBatch(collect)
             .option("checkpointLocation", str(root / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()
    return per_batch


@pytest.mark.all_versions
def test_every_batch_in_update_mode_equals_spark_update_mode(spark, tmp_path):
    """closing='global', emit='every_batch': in every micro-batch our panes are Spark's update-mode
    rows (same windows, same values), plus the on-time pane of each window the watermark passed
    without new rows (Spark's update mode emits nothing then), which repeats its last pane."""
    def replay(name):
        r = Replay(spark, tmp_path / name, schema=SCHEMA)
        r.add_all([[(k, ts(t), v) for k, t, v in b] for b in BATCHES])
        return r.stream()

    ours = (kw.keyed_watermark(replay("ours"), key="device", event_time="ts", lateness="5 seconds",
                               closing="global")
            .window("10 seconds", emit="every_batch")
            .agg(F.sort_array(F.collect_list("temp")).alias("temps")))
    assert ours.columns == ["device", "window", "temps", "kw_pane", "kw_pane_index"]
    theirs = (replay("spark").withWatermark("ts", "5 seconds")
              .groupBy("device", F.window("ts", "10 seconds"))
              .agg(F.sort_array(F.collect_list("temp")).alias("temps")))
    got = run_update(ours, tmp_path / "ours")
    want = run_update(theirs, tmp_path / "spark")

    def key(r):
        return (r.device, r.window.start)

    last = {}  # (device, window start) -> our last pane so far
    extra_on_time = 0
    for batch_id in sorted(set(got) | set(want)):
        mine = {key(r): r for r in got.get(batch_id, [])}
        assert len(mine) == len(got.get(batch_id, [])), "one pane per window and batch"
        spark_rows = {key(r): tuple(r.temps) for r in want.get(batch_id, [])}
        assert {k: tuple(mine[k].temps) for k in spark_rows if k in mine} == spark_rows, batch_id
        assert set(spark_rows) <= set(mine), batch_id
        for k, r in mine.items():
            if k not in spark_rows:
                assert r.kw_pane == "on_time" and tuple(r.temps) == tuple(last[k].temps), (batch_id, r)
                extra_on_time += 1
            assert r.kw_pane_index == (last[k].kw_pane_index + 1 if k in last else 0)
            last[k] = r
    assert {p.kw_pane for p in last.values()} >= {"on_time"}
    assert any(r.kw_pane == "early" for rows in got.values() for r in rows)
    assert extra_on_time >= 1


def test_complete_mode_is_refused_when_the_query_starts(spark, tmp_path):
    # Our check (hooks.OutputModeCheck), in start(), before Spark's own and before any batch.
    replay = Replay(spark, tmp_path, schema=SCHEMA)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in BATCHES[:1]])
    result = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="5 seconds")
              .window("10 seconds", emit="every_batch").agg(F.count("*").alias("n")))
    with pytest.raises(IllegalArgumentException, match=r"outputMode: 'complete' is not supported for a keyed query"):
        (result.select("device", "n").writeStream.outputMode("complete").format("memory").queryName("kw_emit_complete")
         .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    assert not any(q.name == "kw_emit_complete" for q in spark.streams.active)
    assert not (tmp_path / "checkpoint" / "commits").exists() or not any((tmp_path / "checkpoint" / "commits").iterdir())


@pytest.mark.parametrize("window, message", [
    ({"emit": "sometimes"}, "emit: expected 'final', 'every_batch' or 'every <duration>'"),
    ({"emit": "every 10 parsecs"}, "emit: '10 parsecs' is not a valid duration"),
    ({"emit": "every 0 seconds"}, "emit: must be positive"),
    ({"accumulation": "discarding"}, "accumulation: 'discarding' needs repeated panes"),
    ({"emit": "every_batch", "accumulation": "both"}, "accumulation: expected 'accumulating', 'discarding'"),
    ({"emit": 3}, "emit: expected a string"),
])
def test_bad_emit_options_raise_before_start(spark, tmp_path, window, message):
    events = Replay(spark, tmp_path, schema=SCHEMA).stream()
    # Checked in the JVM (the same error on classic and Spark Connect); a non-string in Python.
    with pytest.raises((IllegalArgumentException, TypeError), match=message):
        kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds").window("10 seconds", **window)


# Sessions (gap 10 s, lateness 10 s, one key's rows per batch in time order): a session that is
# due at once, growth (a[30,40) -> a[30,45)), a merge of two sessions by a row between them
# (b[2,12) + b[20,30) -> b[2,30)) and on-time panes of sessions no batch changed.
SESSION_BATCHES = [
    [("a", at(1), 1.0), ("a", at(30), 2.0), ("b", at(2), 3.0)],
    [("b", at(20), 4.0), ("a", at(35), 5.0)],
    [("b", at(11), 6.0), ("a", at(50), 7.0)],
    [("a", at(70), 8.0), ("b", at(45), 9.0)],
]


@pytest.mark.all_versions
def test_session_panes_retract_replaced_sessions(spark, tmp_path):
    """Sessions with emit='every_batch', accumulation='retracting', in update mode: each
    micro-batch's rows equal the session model's panes and retractions, and the rows minus the
    retractions are the sessions of emit='final' (tests/test_emit_in_memory.py: generated cases)."""
    replay = Replay(spark, tmp_path, schema=SCHEMA)
    replay.add_all([[(k, ts(t), v) for k, t, v in b] for b in SESSION_BATCHES])
    result = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="10 seconds",
                                 max_skew="unbounded")
              .session("10 seconds", emit="every_batch", accumulation="retracting")
              .agg(F.sort_array(F.collect_list("temp")).alias("temps")))
    assert result.columns == ["device", "session_window", "temps", "kw_pane", "kw_pane_index", "kw_retraction"]
    got = run_update(result, tmp_path)
    model = run_session_model(SESSION_BATCHES, 10 * SECOND, 10 * SECOND, emit="every_batch",
                              accumulation="retracting")

    def micros(t):
        return int(t.timestamp() * 1_000_000)

    rows = {b: sorted((r.device, micros(r.session_window.start), micros(r.session_window.end), tuple(r.temps),
                       r.kw_pane, r.kw_pane_index, r.kw_retraction) for r in rs) for b, rs in got.items() if rs}
    want = defaultdict(list)
    for s in model.emitted:
        want[s.batch].append((s.key, s.start, s.end, s.values, s.pane, s.revision, s.retraction))
    assert rows == {b: sorted(v) for b, v in want.items()}
    # The merge in batch 2 withdraws both sessions it replaces, b[2,12) and b[20,30).
    assert [(s.batch, s.key) for s in model.emitted if s.retraction].count((2, "b")) == 2
    net = defaultdict(int)
    for rs in rows.values():
        for key, start, end, temps, _, _, retraction in rs:
            net[(key, start, end, temps)] += -1 if retraction else 1
    final = run_session_model(SESSION_BATCHES, 10 * SECOND, 10 * SECOND)
    # Emitted when due, or still open (not due) at the end: no session is both here.
    sessions = {(s.key, s.start, s.end, s.values) for s in final.emitted} | {
        (k, start, end, tuple(sorted(vs))) for k, open_ in final.open.items() for start, end, vs, _, _ in open_}
    assert {k for k, c in net.items() if c} == sessions
    assert set(net.values()) <= {0, 1}


def test_sessions_refuse_spaced_panes_for_now(spark, tmp_path):
    events = Replay(spark, tmp_path, schema=SCHEMA).stream()
    watermark = kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds")
    with pytest.raises(IllegalArgumentException, match="emit: 'every 10 seconds' is not supported for session windows"):
        watermark.session("10 seconds", emit="every 10 seconds")


def test_rollup_refuses_a_stage_that_emits_panes(spark, tmp_path):
    events = Replay(spark, tmp_path, schema=SCHEMA).stream()
    panes = (kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds")
             .window("10 seconds", emit="every_batch").agg(F.count("*").alias("n")))
    with pytest.raises(TypeError, match="once per pane"):
        kw.rollup(panes, key="device", source="device")


def test_spaced_early_panes_run_end_to_end(spark, tmp_path):
    """emit='every 1 hour' through a real query (its option is serialised with every task): each
    window gets at most one early pane (no batch comes an hour after another here), and its last
    pane is the on-time one, equal to emit='final''s result."""
    def replay(name):
        r = Replay(spark, tmp_path / name, schema=SCHEMA)
        r.add_all([[(k, ts(t), v) for k, t, v in b] for b in BATCHES])
        return r.stream()

    def query(name, **emit):
        return (kw.keyed_watermark(replay(name), key="device", event_time="ts", lateness="5 seconds")
                .window("10 seconds", **emit).agg(F.sort_array(F.collect_list("temp")).alias("temps")))

    spaced = run_update(query("spaced", emit="every 1 hour"), tmp_path / "spaced")
    final = run_update(query("final"), tmp_path / "final")
    panes = defaultdict(list)
    for batch_id in sorted(spaced):
        for r in spaced[batch_id]:
            panes[(r.device, r.window.start)].append(r)
    finals = {(r.device, r.window.start): tuple(r.temps) for rows in final.values() for r in rows}
    assert finals and set(finals) <= set(panes)
    for k, ps in panes.items():
        assert [p.kw_pane_index for p in ps] == list(range(len(ps))), k
        assert sum(p.kw_pane == "early" for p in ps) <= 1, k
        if k in finals:
            assert ps[-1].kw_pane == "on_time" and tuple(ps[-1].temps) == finals[k], k
    assert any(p.kw_pane == "early" for ps in panes.values() for p in ps)
