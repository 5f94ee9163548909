"""Real-time mode end to end (Spark 4.3): a real broker (dev/kafka_broker.py), the example
pipeline examples/kafka_real_time.py in its own process (Kafka -> keyed windows with
``real_time=True`` -> Kafka, ``trigger(realTime="5 minutes")``), and the output topic read back.

Checked: Spark accepts the plan in real-time mode with its operator allowlist on (no setting
turned off); the windows written are the record-at-a-time model's (tests/reference_model.py,
``run_model_per_row``), none missing or written twice; and they are written while the first
real-time batch runs, not at its end (5 minutes after it starts). The rows include one that is
late only under the record-at-a-time rule, so the micro-batch rule's windows would differ.

Spark 4.3 only (real-time mode with a transformWithState; the 4.2.0 Kafka connector, as there is
no 4.3.0 one on Maven Central); the older lines skip it.
"""

from __future__ import annotations

import json
import os
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

from reference_model import run_model, run_model_per_row  # noqa: E402

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


def produce(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for device, t, temp in rows():
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t // SECOND)) + f".{t % SECOND:06d}Z"
        p.produce(topic, key=device.encode(), value=json.dumps({"ts": ts, "temp": temp}).encode())
    assert p.flush(60) == 0


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


def test_keyed_windows_close_row_by_row_in_real_time_mode(broker, tmp_path):
    bootstrap = broker.bootstrap
    ensure_topic(bootstrap, "rtm-in", 2)
    ensure_topic(bootstrap, "rtm-out", 1)
    produce(bootstrap, "rtm-in")
    batches = [[(d, t, v) for d, t, v in rows()]]
    model = run_model_per_row(batches, LATENESS_S * SECOND, WINDOW_S * SECOND)
    want = Counter((w.key, w.start, w.end, len(w.values), float(sum(w.values)), max(w.values))
                   for w in model.emitted)
    # The micro-batch rule over the same rows differs (device a's row at 4 s is on time there).
    micro = run_model(batches, LATENESS_S * SECOND, WINDOW_S * SECOND, max_skew=None)
    assert Counter((w.key, w.start, w.end, len(w.values)) for w in micro.emitted) != \
        Counter((k, s, e, n) for k, s, e, n, _, _ in want)

    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    log = open(tmp_path / "pipeline.log", "w")
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "kafka_real_time.py"), "--bootstrap-servers", bootstrap,
         "--input-topic", "rtm-in", "--output-topic", "rtm-out", "--checkpoint", str(tmp_path / "cp"),
         "--lateness", f"{LATENESS_S} seconds", "--window", f"{WINDOW_S} seconds", "--batch", f"{BATCH_S} seconds",
         "--run-for", str(BATCH_S)],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        started = None
        deadline = time.monotonic() + TIMEOUT_S
        while started is None and time.monotonic() < deadline and proc.poll() is None:
            if "started " in (tmp_path / "pipeline.log").read_text():
                started = time.monotonic()
            time.sleep(0.5)
        assert started is not None, (tmp_path / "pipeline.log").read_text()[-4000:]
        got = consume(bootstrap, "rtm-out", sum(want.values()), started + BATCH_S - 30)
        assert proc.poll() is None, (tmp_path / "pipeline.log").read_text()[-4000:]
    finally:
        stop_process(proc)
        log.close()
    windows = Counter((r["device"], r["start_us"], r["end_us"], r["n"], r["sum_temp"], r["max_temp"])
                      for r, _ in got)
    assert windows == want
    # Written while the first real-time batch (BATCH_S) still ran: row by row, not at its end.
    assert all(at - started < BATCH_S - 30 for _, at in got)
