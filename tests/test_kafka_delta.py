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
SEED = 16
# Every crash phase is killed once per run, across the two append-sink crash tests (each kill
# and restart costs a Spark start-up, about a minute on the 2-core machine): the variant with
# the producer writing kills two seeded phases, so a restart also runs while the producer is
# still writing; the seeded test draws a batch for every phase (KILLS, one per phase) and kills
# the other three, mid-results among them.
KILLS = len(PHASES)
LIVE_KILLS = 2
LIVE_PHASES = tuple(random.Random(SEED + 1).sample(PHASES, LIVE_KILLS))
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

    def run_in_process(self, spark) -> None:
        """Runs the pipeline to the end (from its checkpoint, if any) in this process's Spark
        session: the same code as in its own process (kafka_to_delta.start, the session of
        kafka_to_delta.build_session), without a Spark start-up to pay. The restarts after a
        kill -9 that need no crash point of their own run so, and so does the uninterrupted run;
        the pipeline's own process (kafka_to_delta.main) runs to its end in the broker-restart
        run."""
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
def uninterrupted(tmp_path_factory, delta_spark, broker, produced):
    # In this process's session: the pipeline's own process (kafka_to_delta.main) runs to its
    # end in the broker-restart test, and a Spark start-up here would check nothing more.
    run = Run(tmp_path_factory.mktemp("uninterrupted"), broker, "iot-quick")
    run.run_in_process(delta_spark)
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
    drawn = zip(sorted(rng.sample(range(1, n_batches), KILLS)), rng.sample(PHASES, KILLS))
    points = [(batch, phase) for batch, phase in drawn if phase not in LIVE_PHASES]
    assert {p for _, p in points} | set(LIVE_PHASES) == set(PHASES) and any(p == "mid-results" for _, p in points)
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
    run = Run(tmp_path / "live", broker, topic)
    kills, batch, producer = [], 1, None
    for k, phase in enumerate(LIVE_PHASES):  # seeded phases, no repeats; the seeded test kills the rest
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
        run.run_in_process(delta_spark)  # restart from the checkpoint (no second Spark start-up)
    figures = check_against_oracle(delta_spark, run, produced)
    print(f"\nbroker restart: {outcome}; {figures}")


# -- the MERGE upsert sink: early panes, one row per window (--emit every_batch --sink merge) --

# Retracting: its retraction rows are what a MERGE sink must skip (accumulating panes need no
# skipping, and hold the same values).
MERGE_ACCUMULATION = "retracting"
# Larger micro-batches than the append tests' (5 micro-batches of the quick stream, not 8): fewer
# MERGEs to pay for, still windows with early panes in one batch and on-time ones in a later.
MERGE_MAX_OFFSETS = 400
# One seeded kill point, after the batch's MERGE committed and before Spark's commit, so the
# replayed batch's MERGE must be skipped: what only the MERGE sink must do. A kill before the
# MERGE (the batch replayed as if never written) is the append sink's case, whose every phase
# the tests above kill; each kill costs a Spark start-up (about a minute on 2 cores).
MERGE_KILL_PHASES = (("between-tables", "after-both"),)
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


# -- catch-up after an outage (issue 39): the arrival clock and the skew bound on Kafka --------
#
# A fleet written to a one-partition topic tick by tick, one tick per 2 s of arrival time, each
# message carrying its tick's instant as its Kafka timestamp (set by the producer: CreateTime),
# which the idle query takes as arrival time (arrival_time="timestamp"). Every tick has the same
# number of messages (a chatty device fills it up), so maxOffsetsPerTrigger=TICK cuts a backlog
# where a live query's micro-batches ended (with several partitions Spark would prorate the
# limit over the partitions' backlogs). Per query, three runs compared window by window:
#   live:     the whole topic, one tick per micro-batch (what a query that keeps up reads);
#   outage:   the query runs while the producer writes ticks 0..CATCHUP_DOWN, each after the
#             last was read; the query is stopped, the producer writes the rest, and the query
#             restarts from its checkpoint and catches up with maxOffsetsPerTrigger=TICK;
#   backfill: the whole topic from the earliest offset in micro-batches of 3 ticks.
# Each run is also checked against the policy model (tests/policy_model.py) over the batches
# its checkpoint logged. The fleet: steady devices, uploaders (every 4 s: never idle for 4 s), a
# device that goes silent for good and one away for 8 s that returns with its buffered rows.

CATCHUP_TOPIC, CATCHUP_TICKS, CATCHUP_DOWN = "fleet-catchup", 7, 2
CATCHUP_LATENESS_S, CATCHUP_WINDOW_S, CATCHUP_IDLE_S, CATCHUP_SKEW_S = 1, 6, 4, 2
CATCHUP_BACKFILL_TICKS = 3
CATCHUP_OPTIONS = {
    "arrival_idle": {"idle_timeout": f"{CATCHUP_IDLE_S} seconds", "arrival_time": "timestamp"},
    "fleet_max_skew": {"closing": "fleet", "max_skew": f"{CATCHUP_SKEW_S} seconds"},
}
CATCHUP_T0 = 1_704_067_200  # outage_runner.T0: event seconds count from here


def catchup_ticks(n_ticks: int) -> List[tuple]:
    """(arrival second, [(device, event second)]) per tick, every tick of the same size:
    steady devices d0-d3 (one row per event second), uploaders u0 and u1 (each its last 4
    seconds every other tick, in turn), q (silent after second 5), x (away for ticks 2-4, back
    at tick 5 with its buffered seconds 4-11) and h, which fills each tick up."""
    ticks = []
    for i in range(n_ticks):
        a = 2 * (i + 1)
        now = range(a - 2, a)
        rows = [(d, s) for d in ("d0", "d1", "d2", "d3") for s in now]
        rows += [(f"u{i % 2}", s) for s in range(max(0, a - 4), a)]
        rows += [("q", s) for s in now if s <= 5]
        rows += [("x", s) for s in (now if i < 2 or i > 5 else range(4, a) if i == 5 else ())]
        ticks.append((a, rows))
    size = max(len(rows) for _, rows in ticks) + 2
    return [(a, rows + [("h", a - 2 + j % 2) for j in range(size - len(rows))]) for a, rows in ticks]


def catchup_messages(ticks, arrival_base_ms: int) -> List[tuple]:
    """(device, event second, temp, arrival ms) in offset order."""
    return [(d, s, float(s % 7), arrival_base_ms + a * 1000) for a, rows in ticks for d, s in rows]


def produce_ticks(bootstrap: str, topic: str, ticks, arrival_base_ms: int) -> None:
    """Each tick in one flush (one record batch: a live trigger reads all of it or none)."""
    import json

    from confluent_kafka import Producer

    from outage_runner import iso

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 100})
    errors: List[str] = []
    for tick in ticks:
        for d, s, temp, arrival_ms in catchup_messages([tick], arrival_base_ms):
            value = json.dumps({"device": d, "ts": iso(s), "temp": temp}).encode()
            producer.produce(topic, key=d.encode(), value=value, partition=0, timestamp=arrival_ms,
                             on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
        assert producer.flush(60) == 0 and not errors, errors


def catchup_query(spark, bootstrap: str, root: Path, options: dict, max_offsets: int, available_now: bool):
    from pyspark.sql import functions as F

    import keyed_watermarks as kw

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", CATCHUP_TOPIC).option("startingOffsets", "earliest")
           .option("failOnDataLoss", "true").option("maxOffsetsPerTrigger", max_offsets).load())
    events = raw.select(F.from_json(F.col("value").cast("string"), "device STRING, ts TIMESTAMP, temp DOUBLE")
                        .alias("v"), "timestamp").select("v.*", "timestamp")
    windows = (kw.keyed_watermark(events, key="device", event_time="ts",
                                  lateness=f"{CATCHUP_LATENESS_S} seconds", **options)
               .window(f"{CATCHUP_WINDOW_S} seconds")
               .agg_with_report(F.count("*").alias("n"), F.sum("temp").alias("s")))
    writer = (windows.writeStream.format("parquet").outputMode("append")
              .option("path", str(root / "out")).option("checkpointLocation", str(root / "checkpoint")))
    return writer.trigger(availableNow=True).start() if available_now else writer.start()


def catchup_results(spark, root: Path):
    """The sink's window rows (Counter of (device, start s, n, sum)) and late rows per device."""
    from pyspark.sql import functions as F

    rows = spark.read.parquet(str(root / "out")).select(
        "device", F.unix_seconds("window.start").alias("start"), "n", "s", "kw_kind", "kw_late_rows").collect()
    windows = Counter((r.device, r.start - CATCHUP_T0, r.n, r.s) for r in rows if r.kw_kind == "window")
    late: Counter = Counter()
    for r in rows:
        if r.kw_kind == "late":
            late[r.device] += r.kw_late_rows
    return windows, late


def catchup_model(messages, batches, options: dict):
    """The policy model over the micro-batches a run's checkpoint logged (offsets on partition 0)."""
    from policy_model import Policy, run_policy_model
    from support import SECOND as S

    rows, arrivals = [], []
    for b in batches:
        start, end = b.get(0, (0, 0))
        rows.append([(d, (CATCHUP_T0 + s) * S, temp, None, None) for d, s, temp, _ in messages[start:end]])
        arrivals.append([arr for *_, arr in messages[start:end]])
    lateness, size = CATCHUP_LATENESS_S * S, CATCHUP_WINDOW_S * S
    if "idle_timeout" in options:
        res = run_policy_model(rows, size, Policy(lateness, max_skew=None, idle_timeout=CATCHUP_IDLE_S * S),
                               arrival_ms=arrivals)
    else:
        res = run_policy_model(rows, size, Policy(lateness, max_skew=CATCHUP_SKEW_S * S, fleet=True))
    windows = Counter((k, s // S - CATCHUP_T0, len(v), float(sum(v))) for k, s, _, _, v in res.emitted)
    late: Counter = Counter()
    for (_, k), n in res.late.items():
        late[k] += n
    return windows, late


def window_rows(windows: Counter):
    from outage_runner import Run as WindowRows

    return WindowRows(sorted((d, s, n) for d, s, n, _ in windows.elements()))


def test_kafka_catch_up_after_outage_emits_the_live_windows(delta_spark, broker, tmp_path):
    """Issue 39 on Kafka: a query that was down while the producer kept writing, restarted with
    maxOffsetsPerTrigger, emits the live run's windows, each once, with the live counts and late
    rows (idleness on the arrival clock; closing='fleet' under its skew bound max_skew); a
    backfill in larger micro-batches emits the same windows, each once, a count growing only by
    rows that were late live."""
    from pyspark.sql import functions as F

    from outage_runner import compare

    spark, bootstrap = delta_spark, broker.bootstrap
    started = time.monotonic()
    iot_producer.ensure_topic(bootstrap, CATCHUP_TOPIC, 1)
    ticks = catchup_ticks(CATCHUP_TICKS)
    tick = len(ticks[0][1])
    base_ms = (int(time.time()) - 600) * 1000  # recent: within the topic's retention
    messages = catchup_messages(ticks, base_ms)

    # The outage run, live: the producer writes one tick at a time, each once the queries read the last.
    first = {name: catchup_query(spark, bootstrap, tmp_path / f"outage-{name}", o, tick, False)
             for name, o in CATCHUP_OPTIONS.items()}
    for i in range(CATCHUP_DOWN + 1):
        produce_ticks(bootstrap, CATCHUP_TOPIC, [ticks[i]], base_ms)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while any(sum(p["numInputRows"] for p in q.recentProgress) < tick * (i + 1) for q in first.values()):
            assert all(q.exception() is None for q in first.values()), [q.exception() for q in first.values()]
            assert time.monotonic() < deadline, "the live queries did not read the tick"
            time.sleep(0.1)
    for q in first.values():
        q.stop()
    # Down: the producer writes the rest. Then the restart catches up, beside the live and the
    # backfill runs over the whole topic.
    produce_ticks(bootstrap, CATCHUP_TOPIC, ticks[CATCHUP_DOWN + 1:], base_ms)
    limit = {"outage": tick, "live": tick, "backfill": CATCHUP_BACKFILL_TICKS * tick}
    runs = [catchup_query(spark, bootstrap, tmp_path / f"{kind}-{name}", o, limit[kind], True)
            for name, o in CATCHUP_OPTIONS.items() for kind in limit]
    for q in runs:
        assert q.awaitTermination(STARTUP_TIMEOUT_S), "Trigger.AvailableNow did not end"
        assert q.exception() is None, q.exception()
    seconds = time.monotonic() - started

    # The topic holds the messages as produced, in order, with their timestamps.
    topic = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", CATCHUP_TOPIC).option("startingOffsets", "earliest")
             .option("endingOffsets", "latest").load()
             .select(F.col("key").cast("string").alias("k"), "offset", F.unix_millis("timestamp").alias("t"))
             .orderBy("offset").collect())
    assert [(r.k, r.offset, r.t) for r in topic] == [(d, i, a) for i, (d, _, _, a) in enumerate(messages)]

    figures = {}
    for name, options in CATCHUP_OPTIONS.items():
        got = {}
        for kind in limit:
            root = tmp_path / f"{kind}-{name}"
            batches = logged_batches(root / "checkpoint", CATCHUP_TOPIC)
            data = [b[0] for b in batches if b[0][1] > b[0][0]]
            per = limit[kind]
            assert data == [(s, min(s + per, len(messages))) for s in range(0, len(messages), per)], (kind, name)
            got[kind] = catchup_results(spark, root)
            assert got[kind] == catchup_model(messages, batches, options), (kind, name)
        (live, live_late), (outage, outage_late), (backfill, backfill_late) = (
            got["live"], got["outage"], got["backfill"])
        # The catch-up: the live windows, each once, with the live counts, sums and late rows.
        assert outage == live and outage_late == live_late
        assert all(c == 1 for c in window_rows(live).windows.values())
        # The backfill: the same windows, each once; a count grows only by rows late live.
        diff = compare(window_rows(live), window_rows(backfill))
        assert diff["missing"] == [] and diff["extra"] == [] and diff["twice"] == [], diff
        assert all(now[0] > was[0] for _, was, now in diff["counts_differ"]), diff
        grown = sum(now[0] - was[0] for _, was, now in diff["counts_differ"])
        assert grown == sum(live_late.values()) - sum(backfill_late.values()) > 0, (diff, live_late, backfill_late)
        figures[name] = {"windows": sum(live.values()), "late_live": sum(live_late.values()),
                         "late_backfill": sum(backfill_late.values()), "grown": diff["counts_differ"]}
    print(f"\nKafka catch-up ({len(messages)} messages, {len(ticks)} ticks of {tick}, down after tick "
          f"{CATCHUP_DOWN}): {figures}; {seconds:.0f} s of queries")
