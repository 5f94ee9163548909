"""Kafka -> keyed windows -> Delta, end to end, with a real broker (dev/kafka_broker.py), the
real producer (examples/iot_producer.py), the real pipeline (examples/kafka_to_delta.py) in
its own process (the last restart after the kills, which needs no crash point, runs the same
pipeline code in the test's Spark session: one Spark start-up less each), and Delta tables read
back with Spark.

Oracles (tests/kafka_oracle.py): the messages read back from the topic, the micro-batches the
query's checkpoint logged, the reference model over those batches (which rows are on time,
late or invalid; which batch emits which window) and Spark's batch groupBy().agg() over the
on-time rows. Crash tests kill -9 the pipeline's whole process group at seeded points
(tests/kafka_crash_runner.py) and restart it from its checkpoint.

Runs on Spark 4.2 only (Delta and Spark's Kafka connector do not exist for 4.3): dev/test runs
this module with the Spark 4.2 virtualenv (and never skips it there unless KW_SKIP_KAFKA_TESTS=1
asks to); run by hand under another Spark, it skips with that reason.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import List, Optional

import pyspark
import pytest

if os.environ.get("KW_SKIP_KAFKA_TESTS") == "1":
    pytest.skip("KW_SKIP_KAFKA_TESTS=1 asked to skip the Kafka -> Delta tests", allow_module_level=True)
if not pyspark.__version__.startswith("4.2."):
    # Only reached when run by hand under another line: dev/test runs this module with the
    # Spark 4.2 virtualenv and leaves it out (--ignore) of the other lines' runs.
    pytest.skip(f"Kafka -> Delta runs on Spark 4.2 (Delta, Kafka connector), not "
                f"{pyspark.__version__}: dev/test --spark 4.2", allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(REPO / "examples"))
import iot_producer  # noqa: E402
import kafka_broker  # noqa: E402
import kafka_to_delta  # noqa: E402
from iot_demo import Config  # noqa: E402

from kafka_crash_runner import PHASES  # noqa: E402
from kafka_oracle import (  # noqa: E402
    duplicates, expected, latest_panes, logged_batches, read_dead_letter, read_results, read_topic,
    spark_values_over, spark_window_values)

pytestmark = pytest.mark.slow  # its own processes (see pytest.ini)

LATENESS_S, WINDOW_S = 30, 60
MAX_OFFSETS = 250  # per micro-batch: the quick stream (1,620 messages) makes 7 batches
KILLS = 5
# The variant with the producer writing (each restart costs a Spark start-up): two kills, so a
# restart also runs while the producer is still writing; every phase is killed in the
# seeded test (KILLS = 5, one per phase), which this one need not repeat.
LIVE_KILLS = 2
SEED = 16
PARTITIONS = 4
STARTUP_TIMEOUT_S = 600  # generous bounds for a loaded 2-core machine; not assertions


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = kafka_broker.start(state_dir=tmp_path_factory.mktemp("kafka-state"))
    yield b
    b.stop()


@pytest.fixture(scope="module")
def delta_spark():
    spark = kafka_to_delta.build_session(argparse.Namespace(master="local[2]", kafka_package=None))
    yield spark
    spark.stop()


def produce(broker, topic: str, msgs, speedup: float = 0.0) -> None:
    iot_producer.ensure_topic(broker.bootstrap, topic, PARTITIONS)
    iot_producer.produce(broker.bootstrap, topic, msgs, speedup, log=lambda *a, **k: None)


@pytest.fixture(scope="module")
def produced(broker):
    """The quick demo stream plus 6 malformed messages, in topic 'iot-quick'."""
    msgs = iot_producer.messages(Config.quick())
    produce(broker, "iot-quick", msgs)
    return msgs


class Run:
    """One pipeline's checkpoint and tables under ``root``."""

    def __init__(self, root: Path, broker, topic: str) -> None:
        self.root, self.broker, self.topic = root, broker, topic
        root.mkdir(parents=True, exist_ok=True)
        self.results = str(root / "windows")
        self.dead_letter = str(root / "dead_letter")
        self.checkpoint = root / "checkpoint"
        self.attempts = 0

    def args(self, available_now: bool = True) -> List[str]:
        a = ["--bootstrap-servers", self.broker.bootstrap, "--topic", self.topic,
             "--results-table", self.results, "--dead-letter-table", self.dead_letter,
             "--checkpoint", str(self.checkpoint), "--window", f"{WINDOW_S} seconds",
             "--lateness", f"{LATENESS_S} seconds", "--max-offsets-per-trigger", str(MAX_OFFSETS)]
        return a + (["--available-now"] if available_now else [])

    def spawn(self, cmd: List[str]) -> subprocess.Popen:
        self.attempts += 1
        log = open(self.root / f"attempt-{self.attempts}.log", "wb")
        # Own process group: the driver, its JVM and Python workers die together on killpg.
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, cwd=REPO)

    def log_tail(self) -> str:
        return (self.root / f"attempt-{self.attempts}.log").read_text(errors="replace")[-3000:]

    def run_to_end(self, available_now: bool = True) -> None:
        proc = self.spawn([sys.executable, str(REPO / "examples" / "kafka_to_delta.py"),
                           *self.args(available_now)])
        rc = proc.wait(timeout=STARTUP_TIMEOUT_S)
        assert rc == 0, f"pipeline failed ({rc}):\n{self.log_tail()}"

    def run_in_process(self, spark) -> None:
        """Runs the pipeline to the end (from its checkpoint, if any) in this process's Spark
        session: the same code as in its own process (kafka_to_delta.start, the session of
        kafka_to_delta.build_session), without a Spark start-up to pay. The restarts after a
        kill -9 that need no crash point of their own run so; the pipeline's own process
        (kafka_to_delta.main) runs to its end in the uninterrupted and broker-restart runs."""
        query = kafka_to_delta.start(spark, kafka_to_delta.parse_args(self.args()), log=lambda _: None)
        try:
            query.awaitTermination()
        finally:
            spark.streams.removeListener(query.printer)
        assert query.exception() is None, query.exception()

    def run_until_crash(self, batch: int, phase: str, available_now: bool = True) -> dict:
        """Starts the pipeline with a crash point, kill -9s its process group there."""
        marker = self.root / f"crash-{self.attempts + 1}"
        tables = {"results": self.results, "dead_letter": self.dead_letter}
        before = {t: set(uncommitted_files(Path(p))) for t, p in tables.items()}
        proc = self.spawn([sys.executable, str(REPO / "tests" / "kafka_crash_runner.py"),
                           "--crash-at", f"{batch}:{phase}", "--marker", str(marker), "--",
                           *self.args(available_now)])
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not marker.exists():
            if proc.poll() is not None:
                pytest.fail(f"pipeline exited ({proc.returncode}) before {batch}:{phase}:\n"
                            f"{self.log_tail()}")
            if time.monotonic() > deadline:
                kill_group(proc)
                pytest.fail(f"crash point {batch}:{phase} not reached:\n{self.log_tail()}")
            time.sleep(0.05)
        kill_group(proc)
        left = {t: len(set(uncommitted_files(Path(p))) - before[t]) for t, p in tables.items()}
        # What the killed write left: data files with rows that no Delta commit references.
        return {"batch": batch, "phase": phase, "uncommitted_files_left": left}


def kill_group(proc: subprocess.Popen) -> None:
    """kill -9 the pipeline: its process group (driver and JVM) and every descendant's group
    (PySpark's worker daemon puts itself and the Python workers in a group of their own), then
    wait until none of those processes is left."""
    groups = {proc.pid} | {pgid for _, pgid in descendants(proc.pid)}
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while alive_in_groups(groups):
        assert time.monotonic() < deadline, f"survived kill -9: {alive_in_groups(groups)}"
        time.sleep(0.1)


def processes():
    """(pid, ppid, pgid, state) of every process, from /proc."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid, pgid = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        yield int(stat.parent.name), int(ppid), int(pgid), state


def descendants(root: int):
    procs = list(processes())
    found, frontier = [], {root}
    while frontier:
        children = [(pid, pgid) for pid, ppid, pgid, _ in procs if ppid in frontier]
        found += children
        frontier = {pid for pid, _ in children}
    return found


def alive_in_groups(groups) -> List[int]:
    return [pid for pid, _, pgid, state in processes() if pgid in groups and state != "Z"]


def uncommitted_files(table: Path) -> List[str]:
    """Data files with rows, or cut off mid-write, in a Delta table directory that no commit in
    its log adds (the empty file Spark writes for an empty batch is never added, and is left out
    here)."""
    import json

    import pyarrow.parquet as pq

    added = set()
    for commit in (table / "_delta_log").glob("*.json"):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                added.add(action["add"]["path"])
    return sorted(p.name for p in table.glob("*.parquet")
                  if p.name not in added and (truncated(p) or pq.read_metadata(p).num_rows > 0))


def truncated(path: Path) -> bool:
    """A file the kill -9 cut off mid-write (0 bytes, or no Parquet footer yet): a leftover no
    commit can reference, counted with the uncommitted files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
        return False
    except (pa.ArrowInvalid, OSError):
        return True


# -- checks ---------------------------------------------------------------------------------


def check_against_oracle(spark, run: Run, produced_msgs) -> dict:
    """The tables equal the oracle's over the batches the checkpoint logged; returns figures."""
    messages = read_topic(spark, run.broker.bootstrap, run.topic)
    # The broker holds exactly what the producer sent, once each.
    assert Counter((m.key, m.value) for m in messages) == Counter(
        (p.key, p.value.decode()) for p in produced_msgs)
    batches = logged_batches(run.checkpoint, run.topic)
    exp = expected(messages, batches, LATENESS_S, WINDOW_S)
    results = read_results(spark, run.results)
    dead = read_dead_letter(spark, run.dead_letter)

    # Windows: each emitted once, in the batch the model says, with Spark's groupBy values.
    got_windows = Counter((r[0], r[1]) for r in results)
    assert duplicates((r[0], r[1]) for r in results) == 0
    assert set(got_windows) == set(exp.windows)
    assert {(r[0], r[1]): r[6] for r in results} == exp.windows
    truth = spark_window_values(spark, run.broker.bootstrap, run.topic, exp, f"{WINDOW_S} seconds")
    assert set(truth) == set(exp.windows)
    for device, start, n, avg, mn, mx, _ in results:
        t_n, t_avg, t_min, t_max = truth[(device, start)]
        assert (n, mn, mx) == (t_n, t_min, t_max), (device, start)
        assert math.isclose(avg, t_avg, rel_tol=1e-12), (device, start, avg, t_avg)

    # Dead letter: exactly the late rows (with the key's watermark) and the malformed messages.
    assert duplicates((r[0], r[1]) for r in dead) == 0
    assert {(r[0], r[1]): (r[2], r[3], r[4]) for r in dead} == exp.dead_letter
    values = {(m.partition, m.offset): m.value for m in messages}
    assert all(r[5] == values[(r[0], r[1])] for r in dead)

    # Accounting: aggregated + still open + late + invalid = produced.
    late = sum(1 for r in dead if r[2] == "late")
    invalid = len(dead) - late
    aggregated = sum(r[2] for r in results)
    assert aggregated + exp.model.open_rows() + late + invalid == len(messages) == len(produced_msgs)
    return {"batches": len(batches), "windows": len(results), "late": late, "invalid": invalid,
            "aggregated": aggregated, "open": exp.model.open_rows(), "messages": len(messages)}


def table_multisets(spark, run: Run):
    results = Counter((d, s, n, round(a, 9), mn, mx, b) for d, s, n, a, mn, mx, b in
                      read_results(spark, run.results))
    dead = Counter(read_dead_letter(spark, run.dead_letter))
    return results, dead


def crash_figures(spark, run: Run, reference: Run) -> dict:
    got_r, got_d = table_multisets(spark, run)
    exp_r, exp_d = table_multisets(spark, reference)
    return {
        "windows_expected": sum(exp_r.values()), "windows_written": sum(got_r.values()),
        "windows_duplicated": sum((got_r - exp_r).values()),
        "windows_missing": sum((exp_r - got_r).values()),
        "dead_letter_expected": sum(exp_d.values()), "dead_letter_written": sum(got_d.values()),
        "dead_letter_duplicated": sum((got_d - exp_d).values()),
        "dead_letter_missing": sum((exp_d - got_d).values()),
    }


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, broker, produced):
    run = Run(tmp_path_factory.mktemp("uninterrupted"), broker, "iot-quick")
    run.run_to_end()
    return run


# -- tests ----------------------------------------------------------------------------------


def test_end_to_end_tables_equal_spark_groupby_over_on_time_rows(delta_spark, uninterrupted, produced):
    figures = check_against_oracle(delta_spark, uninterrupted, produced)
    print(f"\nend to end: {figures}")
    # A stream that exercises every path: several batches, late rows, each malformed kind.
    assert figures["batches"] >= KILLS + 1
    assert figures["late"] >= 1 and figures["invalid"] == 6 and figures["windows"] >= 50


def test_kill9_at_seeded_points_loses_and_duplicates_nothing(delta_spark, tmp_path, broker,
                                                            produced, uninterrupted):
    n_batches = len(logged_batches(uninterrupted.checkpoint, uninterrupted.topic))
    rng = random.Random(SEED)
    points = list(zip(sorted(rng.sample(range(1, n_batches), KILLS)), rng.sample(PHASES, KILLS)))
    run = Run(tmp_path / "crashed", broker, "iot-quick")
    kills = []
    for batch, phase in points:
        kills.append(run.run_until_crash(batch, phase))
        # The batch was cut before Spark committed it: its replay is what must not double.
        assert not (run.checkpoint / "commits" / str(batch)).exists()
        assert (run.checkpoint / "offsets" / str(batch)).exists()
    run.run_in_process(delta_spark)  # the last restart, to the end
    figures = crash_figures(delta_spark, run, uninterrupted)
    print(f"\nkill points: {kills}\nfigures: {figures}")
    assert figures["windows_duplicated"] == figures["windows_missing"] == 0
    assert figures["dead_letter_duplicated"] == figures["dead_letter_missing"] == 0
    assert figures["windows_written"] == figures["windows_expected"] > 0
    # The kill mid-way through the results table's write left a data file with rows that no
    # Delta commit references: the write was cut, and its rows came back exactly once.
    assert any(k["uncommitted_files_left"]["results"] > 0 for k in kills if k["phase"] == "mid-results")
    check_against_oracle(delta_spark, run, produced)


def test_kill9_while_producer_keeps_writing(delta_spark, tmp_path, broker):
    """The producer writes while the pipeline is down (and on after it restarts); the
    pipeline runs continuously (no AvailableNow), so its micro-batches depend on timing and the
    tables are checked against the oracle over the batches its checkpoint logged."""
    topic = "iot-live"
    msgs = iot_producer.messages(Config.quick(seed=SEED))
    chunks = [msgs[i * len(msgs) // (LIVE_KILLS + 1):(i + 1) * len(msgs) // (LIVE_KILLS + 1)]
              for i in range(LIVE_KILLS + 1)]
    produce(broker, topic, chunks[0])
    rng = random.Random(SEED + 1)
    run = Run(tmp_path / "live", broker, topic)
    kills, batch, producer = [], 1, None
    for k, phase in enumerate(rng.sample(PHASES, LIVE_KILLS)):  # seeded phases, no repeats
        kills.append(run.run_until_crash(batch, phase, available_now=False))
        if producer is not None:
            producer.join()
        # Next chunk, at 60x simulated time, written while the pipeline is down.
        producer = Producing(broker, topic, chunks[k + 1])
        batch += 1  # the restart replays the cut batch, then this one needs new data
    producer.join()
    run.run_in_process(delta_spark)  # the last restart, to the end (AvailableNow)
    figures = check_against_oracle(delta_spark, run, msgs)
    print(f"\nkill points: {kills}\nfigures: {figures}")


class Producing:
    """The producer in a thread: it keeps writing while the test restarts the pipeline."""

    def __init__(self, broker, topic: str, msgs) -> None:
        import threading

        self.error: Optional[BaseException] = None

        def target():
            try:
                iot_producer.produce(broker.bootstrap, topic, msgs, 60.0, log=lambda *a, **k: None)
            except BaseException as e:  # re-raised by join()
                self.error = e

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(timeout=STARTUP_TIMEOUT_S)
        assert not self.thread.is_alive(), "producer did not finish"
        if self.error is not None:
            raise self.error


def test_broker_restart_while_query_runs(delta_spark, tmp_path, broker, produced):
    run = Run(tmp_path / "broker-restart", broker, "iot-quick")
    proc = run.spawn([sys.executable, str(REPO / "examples" / "kafka_to_delta.py"), *run.args()])
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not (run.checkpoint / "commits" / "0").exists():
        assert proc.poll() is None, f"pipeline exited early:\n{run.log_tail()}"
        assert time.monotonic() < deadline, "no batch committed"
        time.sleep(0.1)
    broker.halt()  # controlled shutdown; data kept, same port on relaunch
    try:
        proc.wait(timeout=15)  # Spark's Kafka source either fails or keeps retrying
        outcome = f"query failed while the broker was down (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        outcome = "query waited for the broker"
    broker.launch()
    if proc.poll() is None:
        assert proc.wait(timeout=STARTUP_TIMEOUT_S) == 0, run.log_tail()
    else:
        assert proc.returncode != 0  # it stopped because of the broker, not by finishing
        run.run_to_end()  # restart from the checkpoint
    figures = check_against_oracle(delta_spark, run, produced)
    print(f"\nbroker restart: {outcome}; {figures}")


# -- the MERGE upsert sink: early panes, one row per window (--emit every_batch --sink merge) --

# Retracting: its retraction rows are what a MERGE sink must skip (accumulating panes need no
# skipping, and hold the same values).
MERGE_ACCUMULATION = "retracting"
# Larger micro-batches than the append tests' (5 micro-batches of the quick stream, not 8): fewer
# MERGEs to pay for, still windows with early panes in one batch and on-time ones in a later.
MERGE_MAX_OFFSETS = 400
# Two seeded kill points: one phase of each group; the second group's are after the batch's
# MERGE committed and before Spark's commit, so the replayed batch's MERGE must be skipped.
MERGE_KILL_PHASES = (("before-results", "mid-dead-letter"), ("between-tables", "after-both"))
MERGED_BEFORE_COMMIT = {"between-tables", "after-both"}


class MergeRun(Run):
    def args(self, available_now: bool = True) -> List[str]:
        return super().args(available_now) + [
            "--max-offsets-per-trigger", str(MERGE_MAX_OFFSETS),  # the last one given counts
            "--emit", "every_batch", "--accumulation", MERGE_ACCUMULATION, "--sink", "merge"]


def merged_txn_versions(table: str) -> List[tuple]:
    """(Delta version, txnVersion) of every commit in the table's log that carries an
    idempotent-write transaction: one per MERGE that the pipeline committed."""
    import json

    out = []
    for commit in sorted((Path(table) / "_delta_log").glob("*.json")):
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "txn" in action:
                out.append((int(commit.stem), action["txn"]["version"]))
    return out


def read_merged(spark, table: str, version: Optional[int] = None) -> List[tuple]:
    """(device, start micros, n, avg, min, max, kw_pane, kw_pane_index, batch_id) per row of
    the upserted results table (as of a Delta version, if given)."""
    from pyspark.sql import functions as F

    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return [tuple(r) for r in reader.load(table).select(
        "device", F.unix_micros("window.start").alias("start"), "n", "avg_temp", "min_temp",
        "max_temp", "kw_pane", "kw_pane_index", "batch_id").collect()]


def check_merged(spark, run: Run, produced_msgs) -> dict:
    """The upserted table holds, per window, exactly the model's latest pane (its kind, index
    and batch) with Spark's groupBy values over that pane's messages; every on-time window of
    the stream ends with its on-time pane; nothing is in it twice."""
    messages = read_topic(spark, run.broker.bootstrap, run.topic)
    assert len(messages) == len(produced_msgs)
    batches = logged_batches(run.checkpoint, run.topic)
    exp = expected(messages, batches, LATENESS_S, WINDOW_S, emit="every_batch",
                   accumulation=MERGE_ACCUMULATION)
    rows = read_merged(spark, run.results)
    assert duplicates((r[0], r[1]) for r in rows) == 0
    latest = latest_panes(exp.model)
    assert {(r[0], r[1]): (r[6], r[7], r[8]) for r in rows} == {
        k: (w.pane, w.revision, w.batch) for k, w in latest.items()}
    truth = spark_values_over(spark, run.broker.bootstrap, run.topic,
                              {k: list(w.values) for k, w in latest.items()}, f"{WINDOW_S} seconds")
    for device, start, n, avg, mn, mx, *_ in rows:
        t_n, t_avg, t_min, t_max = truth[(device, start)]
        assert (n, mn, mx) == (t_n, t_min, t_max), (device, start)
        assert math.isclose(avg, t_avg, rel_tol=1e-12), (device, start, avg, t_avg)
    # Every window the default emission (emit='final') emits ends as its on-time pane, with
    # the same rows; the rest are windows still open after the last batch.
    final = expected(messages, batches, LATENESS_S, WINDOW_S)
    on_time = {k for k, w in latest.items() if w.pane == "on_time"}
    assert on_time == set(final.windows)
    assert all(latest[k].values == tuple(final.on_time[k]) for k in on_time)
    assert {k for k, w in latest.items() if w.pane == "early"} == set(final.model.open)
    retractions = sum(1 for w in exp.model.emitted if w.retraction)
    return {"batches": len(batches), "windows": len(rows), "on_time": len(on_time),
            "open": len(rows) - len(on_time), "panes": len(exp.model.emitted) - retractions,
            "retractions_skipped": retractions, "model": exp.model}


@pytest.fixture(scope="module")
def merge_uninterrupted(tmp_path_factory, delta_spark, broker, produced):
    run = MergeRun(tmp_path_factory.mktemp("merge-uninterrupted"), broker, "iot-quick")
    started = time.monotonic()
    run.run_in_process(delta_spark)
    run.seconds = time.monotonic() - started
    return run


def test_merge_upsert_holds_each_windows_latest_pane_then_its_final_value(delta_spark, merge_uninterrupted,
                                                                           produced):
    run = merge_uninterrupted
    figures = check_merged(delta_spark, run, produced)
    model = figures.pop("model")
    # After each batch's MERGE (the Delta version whose transaction is that batch), the table
    # held each window's latest pane so far: early panes first, replaced by later ones.
    txns = merged_txn_versions(run.results)
    assert [b for _, b in txns] == list(range(figures["batches"]))  # one MERGE per batch, in order
    seen_early = set()
    for version, batch in txns:
        rows = read_merged(delta_spark, run.results, version)
        assert {(r[0], r[1]): (r[6], r[7], r[2]) for r in rows} == {
            k: (w.pane, w.revision, len(w.values)) for k, w in latest_panes(model, batch).items()}, batch
        seen_early |= {(r[0], r[1]) for r in rows if r[6] == "early"}
    final = {(r[0], r[1]): r[6] for r in read_merged(delta_spark, run.results)}
    early_then_on_time = sum(1 for k in seen_early if final.get(k) == "on_time")
    figures.update(early_then_on_time=early_then_on_time, seconds=round(run.seconds, 1))
    print(f"\nmerge sink, uninterrupted: {figures}")
    # A stream that exercises the sink: windows whose row existed (early) before their on-time
    # pane, windows still open at the end, and retraction rows that the MERGE skipped.
    assert early_then_on_time >= 10 and figures["open"] >= 1 and figures["retractions_skipped"] >= 1


def test_merge_upsert_kill9_equals_uninterrupted(delta_spark, tmp_path, broker, produced, merge_uninterrupted):
    n_batches = len(logged_batches(merge_uninterrupted.checkpoint, merge_uninterrupted.topic))
    rng = random.Random(SEED + 2)
    phases = [rng.choice(group) for group in MERGE_KILL_PHASES]
    rng.shuffle(phases)
    points = list(zip(sorted(rng.sample(range(1, n_batches), len(phases))), phases))
    run = MergeRun(tmp_path / "merge-crashed", broker, "iot-quick")
    started = time.monotonic()
    kills = []
    for batch, phase in points:
        kill = run.run_until_crash(batch, phase)
        assert not (run.checkpoint / "commits" / str(batch)).exists()
        # The batch's MERGE committed (then the replay must be skipped) or it did not.
        merged = batch in [b for _, b in merged_txn_versions(run.results)]
        assert merged == (phase in MERGED_BEFORE_COMMIT), kill
        kills.append({**kill, "merge_committed": merged})
    run.run_in_process(delta_spark)  # the last restart, to the end
    seconds = time.monotonic() - started

    got, want = Counter(read_merged(delta_spark, run.results)), Counter(read_merged(delta_spark, merge_uninterrupted.results))
    got_d, want_d = Counter(read_dead_letter(delta_spark, run.dead_letter)), Counter(
        read_dead_letter(delta_spark, merge_uninterrupted.dead_letter))
    figures = {"windows_expected": sum(want.values()), "windows_written": sum(got.values()),
               "windows_duplicated": sum((got - want).values()), "windows_missing": sum((want - got).values()),
               "dead_letter_duplicated": sum((got_d - want_d).values()),
               "dead_letter_missing": sum((want_d - got_d).values()), "seconds": round(seconds, 1)}
    print(f"\nmerge sink kill points: {kills}\nfigures: {figures}")
    assert got == want and got_d == want_d
    # Each batch's MERGE committed exactly once, replays included.
    txns = [b for _, b in merged_txn_versions(run.results)]
    assert txns == list(range(n_batches)), txns
    check_merged(delta_spark, run, produced)
