"""Real-time mode end to end (Spark 4.3): a real broker (dev/kafka_broker.py), the example
pipeline examples/kafka_real_time.py in its own process (Kafka -> keyed windows with
``real_time=True`` -> Kafka, ``trigger(realTime="5 minutes")``), and the output topic read back.

Checked: Spark accepts the plan in real-time mode with its operator allowlist on (no setting
turned off); the windows written are the record-at-a-time model's (tests/reference_model.py,
``run_model_per_row``), none missing or written twice; and they are written while the first
real-time batch runs, not at its end (5 minutes after it starts). The rows include one that is
late only under the record-at-a-time rule, so the micro-batch rule's windows would differ.

And a crash (kill -9 of the pipeline's process group) in a real-time batch after the one that
committed the first rows, then a restart from the checkpoint: what docs/real-time.md,
"Restarts", says happens. Which rows the committed batches read is taken from the checkpoint
(the last commit's offsets), not assumed: on a loaded machine the first batch can end before it
has read every row already in the topic. The windows the committed rows closed are not written
again; the rows read after them are read again, on the keys' state as the last committed batch
left it, so the windows they closed are written again with the same values; every window of
the model is written, none with other values.

Spark 4.3 only (real-time mode with a transformWithState; the 4.2.0 Kafka connector, as there is
no 4.3.0 one on Maven Central); the older lines skip it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyspark
import pytest

if not pyspark.__version__.startswith("4.3."):
    pytest.skip(f"real-time mode with keyed windows runs on Spark 4.3, not {pyspark.__version__}",
                allow_module_level=True)
if os.environ.get("KW_SKIP_KAFKA_TESTS") == "1":
    pytest.skip("KW_SKIP_KAFKA_TESTS=1 asked to skip the Kafka tests", allow_module_level=True)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(REPO / "examples"))
import kafka_broker  # noqa: E402
from iot_producer import ensure_topic  # noqa: E402
from kafka_real_time import stop_process  # noqa: E402

from kafka_oracle import logged_batches  # noqa: E402
from reference_model import run_model, run_model_per_row  # noqa: E402
from support import short_lived_jvm_env  # noqa: E402

pytestmark = pytest.mark.slow  # its own broker and Spark process (see pytest.ini)

SECOND = 1_000_000
T0 = 1_767_225_600 * SECOND  # 2026-01-01T00:00:00Z, a multiple of the window size
LATENESS_S, WINDOW_S = 5, 10
BATCH_S = 300  # the real-time batch: windows must come well before it ends
TIMEOUT_S = 280  # a generous bound for a loaded 2-core machine; not a latency assertion


def rows():
    """(device, micros, temp) in the order produced, each device in order within its partition.
    Device a's row at 4 s comes after its row at 20 s: per row it is late (wm 15 s), in one
    micro-batch with them it is not."""
    a = [8, 20, 4, 23, 31, 45]
    b = [1, 3, 12, 16, 25, 37, 52]
    out = [("a", T0 + s * SECOND, float(i)) for i, s in enumerate(a)]
    out += [("b", T0 + s * SECOND, float(10 + i)) for i, s in enumerate(b)]
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = kafka_broker.start(state_dir=tmp_path_factory.mktemp("kafka-state"))
    yield b
    b.stop()


def start_pipeline(bootstrap: str, input_topic: str, output_topic: str, checkpoint: Path, batch_s: int,
                   log_path: Path):
    """examples/kafka_real_time.py in a process group of its own (for stop_process or kill -9),
    and the time its query started (it prints "started <id>"; a restart appends to the log)."""
    env = short_lived_jvm_env({**os.environ, "PYTHONPATH": str(REPO / "python")})
    starts = _starts(log_path)
    with open(log_path, "a") as log:
        proc = subprocess.Popen(
            [sys.executable, str(REPO / "examples" / "kafka_real_time.py"), "--bootstrap-servers", bootstrap,
             "--input-topic", input_topic, "--output-topic", output_topic, "--checkpoint", str(checkpoint),
             "--lateness", f"{LATENESS_S} seconds", "--window", f"{WINDOW_S} seconds",
             "--batch", f"{batch_s} seconds", "--run-for", str(BATCH_S)],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        if _starts(log_path) > starts:
            return proc, time.monotonic()
        time.sleep(0.5)
    stop_process(proc)
    raise AssertionError(log_path.read_text()[-4000:])


def _starts(log_path: Path) -> int:
    if not log_path.exists():
        return 0
    return sum(line.startswith("started ") for line in log_path.read_text().splitlines())


def produce(bootstrap: str, topic: str, events=None) -> list:
    """Writes the events in order; returns each one's (partition, offset), in the same order."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    events = rows() if events is None else events
    placed: list = [None] * len(events)

    def delivered(i):
        def report(err, msg):
            assert err is None, err
            placed[i] = (msg.partition(), msg.offset())
        return report

    for i, (device, t, temp) in enumerate(events):
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // SECOND)) + f".{t % SECOND:06d}Z"
        p.produce(topic, key=device.encode(), value=json.dumps({"ts": ts, "temp": temp}).encode(),
                  on_delivery=delivered(i))
    assert p.flush(60) == 0 and None not in placed
    return placed


def read_by_commits(checkpoint: Path, topic: str, events: list, placed: list) -> list:
    """The events (at ``placed``: their partitions and offsets) that the committed batches read,
    by the offsets the checkpoint logged for the last of them (``kafka_oracle.logged_batches``;
    in real-time mode a batch's end offsets are logged when it ends). A device's rows share a
    partition, so these are a prefix of each device's rows."""
    batches = logged_batches(checkpoint, topic)
    ends = {partition: end for partition, (_, end) in batches[-1].items()} if batches else {}
    return [e for e, (partition, offset) in zip(events, placed) if offset < ends.get(partition, 0)]


def consume(bootstrap: str, topic: str, expected: int, deadline: float):
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rtm-test-{time.time_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got = []
    try:
        while time.monotonic() < deadline and len(got) < expected:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append((json.loads(m.value()), time.monotonic()))
        # A little longer: a duplicate would show up here.
        end = time.monotonic() + 5
        while time.monotonic() < end:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append((json.loads(m.value()), time.monotonic()))
    finally:
        c.close()
    return got


def model_windows(model) -> Counter:
    """A model run's emitted windows, as the output topic's rows are read (``written``)."""
    return Counter((w.key, w.start, w.end, len(w.values), float(sum(w.values)), max(w.values))
                   for w in model.emitted)


def written(r: dict) -> tuple:
    """One output-topic row (a window as JSON) as the tuple ``model_windows`` counts."""
    return (r["device"], r["start_us"], r["end_us"], r["n"], r["sum_temp"], r["max_temp"])


def test_keyed_windows_close_row_by_row_in_real_time_mode(broker, tmp_path):
    bootstrap = broker.bootstrap
    ensure_topic(bootstrap, "rtm-in", 2)
    ensure_topic(bootstrap, "rtm-out", 1)
    produce(bootstrap, "rtm-in")
    batches = [[(d, t, v) for d, t, v in rows()]]
    model = run_model_per_row(batches, LATENESS_S * SECOND, WINDOW_S * SECOND)
    want = model_windows(model)
    # The micro-batch rule over the same rows differs (device a's row at 4 s is on time there).
    micro = run_model(batches, LATENESS_S * SECOND, WINDOW_S * SECOND, max_skew=None)
    assert Counter((w.key, w.start, w.end, len(w.values)) for w in micro.emitted) != \
        Counter((k, s, e, n) for k, s, e, n, _, _ in want)

    log_path = tmp_path / "pipeline.log"
    proc, started = start_pipeline(bootstrap, "rtm-in", "rtm-out", tmp_path / "cp", BATCH_S, log_path)
    try:
        got = consume(bootstrap, "rtm-out", sum(want.values()), started + BATCH_S - 30)
        assert proc.poll() is None, log_path.read_text()[-4000:]
    finally:
        stop_process(proc)
    windows = Counter(written(r) for r, _ in got)
    assert windows == want
    # Written while the first real-time batch (BATCH_S) still ran: row by row, not at its end.
    assert all(at - started < BATCH_S - 30 for _, at in got)


CRASH_BATCH_S = 20  # short real-time batches: the first ends (and commits) before the crash


def crash_rows():
    """Three phases of (device, micros, temp). Before the crash: A (read by the first real-time
    batch), B (read by the second, which the crash interrupts); after the restart: C. Window
    [10 s, 20 s) of each device holds rows of A and B, and a's [20 s, 30 s) rows of B and C, so
    their counts need the state the first batch committed and the replayed batch rebuilt. b's 7 s
    (in B) and a's 9 s (in C) are late on that state's watermarks."""
    def at(device, seconds, temps):
        return [(device, T0 + s * SECOND, float(t)) for s, t in zip(seconds, temps)]
    a = at("a", [1, 4, 12, 17], [1, 2, 3, 4]) + at("b", [2, 15], [21, 22])
    b = at("a", [19, 26], [5, 6]) + at("b", [7, 18, 31], [23, 24, 25])
    c = at("a", [28, 9, 41], [7, 8, 9]) + at("b", [33, 47], [26, 27])
    return a, b, c


class OutputTopic:
    """The output topic read from its start, across the pipeline's crash and restart."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rtm-crash-{time.time_ns()}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
        self.consumer.subscribe([topic])
        self.windows: Counter = Counter()

    def read_until(self, done, timeout_s: float) -> None:
        """Polls until ``done(windows)`` holds (then 3 s more, for copies), or the timeout."""
        deadline = time.monotonic() + timeout_s
        quiet_from = None
        while time.monotonic() < deadline:
            m = self.consumer.poll(0.5)
            if m is not None and m.error() is None:
                self.windows[written(json.loads(m.value()))] += 1
            if quiet_from is None and done(self.windows):
                quiet_from = time.monotonic()
            if quiet_from is not None and time.monotonic() - quiet_from > 3:
                return

    def close(self) -> None:
        self.consumer.close()


def test_crash_in_a_real_time_batch_replays_that_batch_on_the_committed_state(broker, tmp_path):
    bootstrap = broker.bootstrap
    ensure_topic(bootstrap, "rtm-crash-in", 2)
    ensure_topic(bootstrap, "rtm-crash-out", 1)
    phase_a, phase_b, phase_c = crash_rows()
    by_a = model_windows(run_model_per_row([phase_a], LATENESS_S * SECOND, WINDOW_S * SECOND))
    by_ab = model_windows(run_model_per_row([phase_a + phase_b], LATENESS_S * SECOND, WINDOW_S * SECOND))
    every = model_windows(run_model_per_row([phase_a + phase_b + phase_c], LATENESS_S * SECOND, WINDOW_S * SECOND))
    by_b, by_c = by_ab - by_a, every - by_ab
    assert by_a and by_b and by_c and len(every) == sum(every.values())  # each window once in the model
    # The windows that need state across the phases: [10 s, 20 s) of a has A's 12 s, 17 s and B's 19 s.
    assert ("a", T0 + 10 * SECOND, T0 + 20 * SECOND, 3, 12.0, 5.0) in by_b

    checkpoint, log_path = tmp_path / "cp", tmp_path / "pipeline.log"
    placed_a = produce(bootstrap, "rtm-crash-in", phase_a)
    out = OutputTopic(bootstrap, "rtm-crash-out")
    proc = None
    try:
        proc, _ = start_pipeline(bootstrap, "rtm-crash-in", "rtm-crash-out", checkpoint, CRASH_BATCH_S, log_path)
        out.read_until(lambda w: set(by_a) <= set(w), TIMEOUT_S)
        assert set(out.windows) == set(by_a), (out.windows, by_a)
        # Wait until a committed batch has read all of A (the first, unless it ended before it
        # had read them all); B then goes to a later batch.
        def a_committed() -> bool:
            return len(read_by_commits(checkpoint, "rtm-crash-in", phase_a, placed_a)) == len(phase_a)

        deadline = time.monotonic() + TIMEOUT_S
        while not a_committed() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert a_committed(), log_path.read_text()[-4000:]
        placed_b = produce(bootstrap, "rtm-crash-in", phase_b)
        out.read_until(lambda w: set(by_ab) <= set(w), TIMEOUT_S)
        assert proc.poll() is None, log_path.read_text()[-4000:]
        os.killpg(proc.pid, signal.SIGKILL)  # kill -9: the pipeline's Python and its Spark JVM
        proc.wait()
        # What the committed batches read: all of A, and of B none (the usual case), or some or
        # all (if a batch that read B committed before the kill; on a slow machine it may).
        committed = read_by_commits(checkpoint, "rtm-crash-in", phase_a + phase_b, placed_a + placed_b)

        proc, _ = start_pipeline(bootstrap, "rtm-crash-in", "rtm-crash-out", checkpoint, CRASH_BATCH_S, log_path)
        produce(bootstrap, "rtm-crash-in", phase_c)
        out.read_until(lambda w: set(every) <= set(w), TIMEOUT_S)
        assert proc.poll() is None, log_path.read_text()[-4000:]
    finally:
        out.close()
        if proc is not None:
            stop_process(proc)
    # Every window of the model, with the model's values, and no other.
    assert set(out.windows) == set(every), (sorted(set(out.windows) - set(every)), sorted(set(every) - set(out.windows)))
    # The windows the committed rows closed, once; those the rows read after them closed (all
    # written before the kill), twice; C's, once.
    by_committed = model_windows(run_model_per_row([committed], LATENESS_S * SECOND, WINDOW_S * SECOND))
    assert by_a <= by_committed <= by_ab, (len(committed), by_committed)
    replayed = by_ab - by_committed
    assert out.windows == every + replayed, (len(committed), sorted(replayed), out.windows)
