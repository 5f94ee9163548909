"""idle_timeout on the stream's arrival clock, end to end (docs/semantics.md, "Idle keys"); and
advance_when_idle and source_idle_timeout on it, in memory against the policy model.

The file source's `_metadata.file_modification_time` is each row's arrival time: one file per
micro-batch (`maxFilesPerTrigger=1`), each with its own modification time. Checked against the
policy model (tests/policy_model.py, the arrival clock: the max arrival of the earlier batches):
every emitted window and the late rows, with `Trigger.AvailableNow` (which must end: the arrival
clock's timers are event-time timers); and that a query that was down in the middle and resumes
from its checkpoint over the backlog emits exactly the same rows as the run that never stopped.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import functions as F

import keyed_watermarks as kw
from policy_model import Policy, run_policy_model
from support import BASE, SECOND, in_memory, ts

IDLE_S = 10
WINDOW_S = 10
ARRIVAL_BASE_S = 1_700_000_000  # files' modification times (seconds)

# (rows (key, event second after BASE, value), the file's arrival second after ARRIVAL_BASE_S)
STREAM: List[Tuple[List[Tuple[str, int, float]], int]] = [
    ([("a", 5, 1.0), ("b", 5, 2.0), ("c", 3, 1.0)], 0),
    ([("b", 15, 3.0), ("c", 4, 1.0)], 5),       # a and c silent from here on
    ([("b", 25, 4.0)], 15),                     # clock 5: nobody idle yet
    ([("a", 8, 6.0), ("b", 35, 5.0)], 25),      # clock 15: a and c idle: [0, 10) emitted, a's row late
    ([("b", 36, 1.0)], 26),                     # clock 25: c forgotten (idle for 10 s more)
    ([("c", 12, 7.0), ("b", 45, 1.0)], 40),     # clock 26: c starts over
    ([("b", 55, 1.0)], 70),                     # clock 40: a idle again, without windows
]


def write_file(spark, root: Path, i: int, rows, arrival_s: int) -> None:
    tmp = root / f"tmp-{i}"
    spark.createDataFrame([(k, ts(BASE + t * SECOND), v) for k, t, v in rows],
                          "device STRING, ts TIMESTAMP, temp DOUBLE").coalesce(1).write.parquet(str(tmp))
    (part,) = [p for p in tmp.iterdir() if p.name.endswith(".parquet")]
    target = root / "input" / f"batch-{i:05d}.parquet"
    shutil.move(str(part), target)
    shutil.rmtree(tmp)
    mtime = ARRIVAL_BASE_S + arrival_s
    os.utime(target, (mtime, mtime))


def query(spark, root: Path):
    events = (spark.readStream.schema("device STRING, ts TIMESTAMP, temp DOUBLE")
              .option("maxFilesPerTrigger", 1).parquet(str(root / "input")))
    return (kw.keyed_watermark(events, key="device", event_time="ts", lateness="0 seconds",
                               idle_timeout=f"{IDLE_S} seconds",
                               arrival_time=F.col("_metadata.file_modification_time"))
            .window(f"{WINDOW_S} seconds")
            .agg_with_report(F.count("*").alias("n"), F.sum("temp").alias("s")))


def run_available_now(spark, root: Path, name: str):
    """Runs the query with Trigger.AvailableNow to its end (it must end) into a parquet sink."""
    q = (query(spark, root).writeStream.format("parquet").outputMode("append")
         .option("path", str(root / name)).option("checkpointLocation", str(root / f"{name}-checkpoint"))
         .trigger(availableNow=True).start())
    ended = q.awaitTermination(240)
    if not ended:
        q.stop()
    assert ended, "Trigger.AvailableNow must end on the arrival clock (its timers are event-time timers)"
    assert q.exception() is None
    return q


def results(spark, root: Path, name: str):
    rows = spark.read.parquet(str(root / name)).select(
        "device", F.unix_micros("window.start").alias("start"), "n", "s", "kw_kind", "kw_late_rows").collect()
    windows = Counter((r.device, (r.start - BASE) // SECOND, r.n, r.s) for r in rows if r.kw_kind == "window")
    late = Counter()
    for r in rows:
        if r.kw_kind == "late":
            late[r.device] += r.kw_late_rows
    return windows, late


def model(stream: Sequence[Tuple[list, int]]):
    batches = [[(k, BASE + t * SECOND, v, None, None) for k, t, v in rows] for rows, _ in stream]
    arrivals: List[List[Optional[int]]] = [[(ARRIVAL_BASE_S + a) * 1000] * len(rows) for rows, a in stream]
    res = run_policy_model(batches, WINDOW_S * SECOND, Policy(0, max_skew=None, idle_timeout=IDLE_S * SECOND),
                           arrival_ms=arrivals)
    windows = Counter((k, (s - BASE) // SECOND, len(vals), float(sum(vals))) for k, s, _, _, vals in res.emitted)
    late = Counter()
    for (_, k), n in res.late.items():
        late[k] += n
    return windows, late, res


def test_idle_keys_close_on_the_arrival_clock_and_available_now_ends(spark, tmp_path):
    (tmp_path / "input").mkdir()
    for i, (rows, arrival) in enumerate(STREAM):
        write_file(spark, tmp_path, i, rows, arrival)
    q = run_available_now(spark, tmp_path, "live")
    want_windows, want_late, res = model(STREAM)
    got_windows, got_late = results(spark, tmp_path, "live")
    assert got_windows == want_windows
    assert got_late == want_late
    # The case exercises what it is about: keys closed by idleness (a's and c's first windows
    # before any row of theirs could close them) and a late row for an idle-emitted window.
    assert ("a", 0, 1, 1.0) in got_windows and ("c", 0, 2, 2.0) in got_windows
    assert got_late["a"] == 1
    # Spark ran the data batches and the one no-data batch after the clock moved in the last one.
    assert res.batches == len(STREAM) + 1
    batch_ids = [p["batchId"] for p in q.recentProgress]
    assert max(batch_ids) + 1 == res.batches


def test_a_query_that_was_down_emits_what_the_live_run_emits(spark, tmp_path):
    """Live: every file read as it arrives. Down: the query stops after the third file, the
    remaining files arrive while it is down, and it resumes from its checkpoint over the backlog
    (one file per micro-batch, as live). The same windows, the same late rows."""
    live, down = tmp_path / "live", tmp_path / "down"
    for root in (live, down):
        (root / "input").mkdir(parents=True)
    for i, (rows, arrival) in enumerate(STREAM):
        write_file(spark, live, i, rows, arrival)
    run_available_now(spark, live, "out")
    for i, (rows, arrival) in enumerate(STREAM[:3]):
        write_file(spark, down, i, rows, arrival)
    run_available_now(spark, down, "out")
    for i, (rows, arrival) in enumerate(STREAM[3:], start=3):
        write_file(spark, down, i, rows, arrival)
    run_available_now(spark, down, "out")
    assert results(spark, down, "out") == results(spark, live, "out")
    assert results(spark, live, "out")[0]  # windows were emitted at all


# -- advance_when_idle and source_idle_timeout on the arrival clock, in memory, against the model --
#
# The operator over the in-memory state store and timers of Spark's TwsTester (the harness of
# tests/test_policies_in_memory.py), batch by batch, with the clocks Spark gives it on the arrival
# clock: Spark's global watermark on the arrival time (the max arrival of the earlier batches)
# and the trailing no-data batch when the last batch moved it. Checked per case: every emitted
# window (bounds, count, sum) in the batch the policy model emits it, the late rows per (batch,
# key), the attempted regressions, and the number of batches.

MODEL_WINDOW_S = 10
MODEL_IDLE_S = 10


def _model_case(harness, data, opts: dict, policy_of, columns: dict) -> None:
    from hypothesis import note
    from hypothesis import strategies as st

    from policy_model import run_policy_model
    from support import (
        ARRIVAL_SCHEMA, arrival_clocks, arrival_rows, arrival_schedule, policy_stream, run_in_memory,
    )

    batches, arrivals = data.draw(arrival_schedule(data.draw(policy_stream())))
    lateness_s = data.draw(st.sampled_from([0, 5]))
    policy = policy_of(lateness_s * SECOND)
    model = run_policy_model(batches, MODEL_WINDOW_S * SECOND, policy, arrival_ms=arrivals)
    clocks = arrival_clocks(arrivals)
    options = {"key": ["device"], "event_time": "ts", "lateness": f"{lateness_s} seconds", "report": True,
               "window": {"size": f"{MODEL_WINDOW_S} seconds"}, **opts}
    note(f"options={options} policy={policy} clocks={clocks} arrivals={arrivals} model={model}")
    h = harness(options, [F.count("*").alias("n"), F.sum("temp").alias("s")],
                {"arrival_time": F.col("arr"), **columns}, schema=ARRIVAL_SCHEMA)
    assert h.timeModeName() == "EventTime"  # the arrival clock: event-time timers
    out = run_in_memory(h, arrival_rows(batches, arrivals), "window", clocks)
    got = Counter((n, r.device, r.start, r.end, r.n, r.s) for n, r in out if r.kw_kind == "window")
    assert got == Counter((b, k, s, e, len(v), float(sum(v))) for k, s, e, b, v in model.emitted)
    assert Counter({(n, r.device): r.kw_late_rows for n, r in out if r.kw_kind == "late"}) == Counter(model.late)
    assert {(n, r.device): (r.kw_regressions, r.wm) for n, r in out if r.kw_kind == "watermark"} == model.held
    assert len(clocks) == model.batches


@pytest.mark.quick
@in_memory
@given(data=st.data())
def test_advance_when_idle_on_arrival_clock_in_memory(harness, data):
    """advance_when_idle: a key silent for idle_timeout on the arrival clock keeps its windows;
    its watermark follows the clock from where it was at its last arrival (closing them in turn),
    and a key idle without open windows for the timeout more is forgotten."""
    _model_case(harness, data, {"idle_timeout": f"{MODEL_IDLE_S} seconds", "advance_when_idle": True},
                lambda lateness: Policy(lateness, max_skew=None, idle_timeout=MODEL_IDLE_S * SECOND,
                                        advance_when_idle=True), {})


@pytest.mark.quick
@in_memory
@given(data=st.data(), expected=st.sampled_from([[], ["a", "b"]]))
def test_source_idle_timeout_on_arrival_clock_in_memory(harness, data, expected):
    """source_idle_timeout: a source whose last arrival (before the batch) is the timeout behind
    the arrival clock no longer holds its key back; if all are, the max applies."""
    _model_case(harness, data, {"source_idle_timeout": f"{MODEL_IDLE_S} seconds",
                                **({"sources": expected} if expected else {})},
                lambda lateness: Policy(lateness, sources=expected, max_skew=None,
                                        source_idle_timeout=MODEL_IDLE_S * SECOND), {"source": F.col("src")})


# -- what the arrival clock refuses: one global watermark per query, and per checkpoint -------


def _stage(spark, root: Path, **options):
    events = (spark.readStream.schema("device STRING, ts TIMESTAMP, temp DOUBLE")
              .option("maxFilesPerTrigger", 1).parquet(str(root / "input")))
    if "arrival_time" in options:
        options["arrival_time"] = F.col("_metadata.file_modification_time")
    return (kw.keyed_watermark(events, key="device", event_time="ts", lateness="0 seconds", **options)
            .window(f"{WINDOW_S} seconds").agg(F.count("*").alias("n")))


def _run(df, root: Path):
    q = (df.writeStream.format("parquet").outputMode("append").option("path", str(root / "out"))
         .option("checkpointLocation", str(root / "checkpoint")).trigger(availableNow=True).start())
    try:
        q.awaitTermination(240)
    except Exception:  # noqa: BLE001 - a failed query raises it here; the test reads q.exception()
        pass
    return q


@pytest.mark.parametrize("first, then", [
    pytest.param({}, {"idle_timeout": f"{IDLE_S} seconds", "arrival_time": True}, id="max_skew_then_arrival"),
    pytest.param({"idle_timeout": f"{IDLE_S} seconds", "arrival_time": True}, {"closing": "fleet"},
                 id="arrival_then_fleet"),
])
def test_checkpoint_of_another_global_watermark_is_refused(spark, tmp_path, first, then):
    """Spark keeps one global watermark value in the checkpoint: written by a stage whose value is
    event time (max_skew, by default, or closing), it cannot become the arrival clock of idle
    options added at a restart, nor the other way round. Refused by the stage record before the
    first micro-batch after the restart, naming both sides' options; nothing is committed."""
    (tmp_path / "input").mkdir()
    for i, (rows, arrival) in enumerate(STREAM[:2]):
        write_file(spark, tmp_path, i, rows, arrival)
    q = _run(_stage(spark, tmp_path, **dict(first)), tmp_path)
    assert q.exception() is None
    commits = sorted((tmp_path / "checkpoint" / "commits").iterdir())
    write_file(spark, tmp_path, 2, *STREAM[2])
    q = _run(_stage(spark, tmp_path, **dict(then)), tmp_path)
    message = str(q.exception())
    assert "global watermark" in message and "restart it from a new checkpoint location" in message, message
    assert "on event time (max_skew / closing)" in message and "arrival_time" in message, message
    assert sorted((tmp_path / "checkpoint" / "commits").iterdir()) == commits


def test_a_stage_after_an_arrival_clock_stage_cannot_follow_the_global_watermark(spark, tmp_path):
    """A later keyed stage's skew bound (its default, or set) would follow the upstream stage's
    arrival clock as if it were event time: refused before the query starts, naming
    max_skew='unbounded', which is accepted."""
    (tmp_path / "input").mkdir()
    devices = _stage(spark, tmp_path, idle_timeout=f"{IDLE_S} seconds", arrival_time=True)
    for options in ({}, {"max_skew": "1 minute"}):
        with pytest.raises(Exception, match=r"max_skew / closing: .*arrival clock.*max_skew='unbounded'"):
            kw.rollup(devices, key="device", source="device", **options).window("1 minute").agg(F.sum("n"))
    assert kw.rollup(devices, key="device", source="device", max_skew="unbounded").window(
        "1 minute").agg(F.sum("n")).isStreaming
