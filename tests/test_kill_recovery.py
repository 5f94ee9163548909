"""Killed with SIGKILL at arbitrary moments, a keyed-watermark query restarted from its
checkpoint loses no window and emits none twice: its output is exactly the reference model's
(tests/reference_model.py) for the same micro-batches. With Spark's parquet sink (exactly once
through its metadata log) and RocksDB changelog checkpointing, and with an idempotent
``foreachBatch`` (each micro-batch overwrites its own output) and full snapshots.

The query runs in its own process (tests/kill_queries.py), one micro-batch after another; the
test kills it as soon as a given number of micro-batches has committed (the next one is then
usually in flight), once per variant at a different point (each kill costs a Spark start-up,
about a minute on the 2-core CI machine; the Kafka -> Delta tests kill one pipeline several
times), and then lets it process the rest.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from reference_model import run_model
from support import SECOND, Replay, four_device_batches, ts

pytestmark = pytest.mark.slow  # its own processes (see pytest.ini)

HERE = Path(__file__).resolve().parent


def committed(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def start(sink: str, changelog: str, workdir: Path, trigger: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(HERE / "kill_queries.py"), sink, changelog, str(workdir / "input"),
         str(workdir / "out"), str(workdir / "checkpoint"), trigger],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("sink, changelog, kill_after", [("parquet", "on", 2), ("foreach", "off", 4)])
def test_kill_9_loses_and_duplicates_no_window(spark, workdir, sink, changelog, kill_after):
    batches = four_device_batches(seed=17)
    Replay(spark, workdir).add_all([[(k, ts(t), v) for k, t, v in b] for b in batches])
    model = run_model(batches, 2 * SECOND, 10 * SECOND)

    proc = start(sink, changelog, workdir, "continuous")
    deadline = time.monotonic() + 600
    while committed(workdir / "checkpoint") < kill_after and proc.poll() is None:
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    proc.kill()  # SIGKILL: no shutdown hook, no state store close, no commit
    proc.wait()
    assert committed(workdir / "checkpoint") < len(batches), "killed before the end"
    proc = start(sink, changelog, workdir, "available")
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]

    out = spark.read.parquet(str(workdir / "out"))
    got = Counter((r.device, r.start, r.n, r.s) for r in out.select(
        "device", F.unix_micros("window.start").alias("start"), "n", "s").collect())
    want = Counter((w.key, w.start, len(w.values), float(sum(w.values))) for w in model.emitted)
    lost, duplicated = want - got, got - want
    assert (sum(lost.values()), sum(duplicated.values())) == (0, 0), (lost, duplicated)
    assert sum(want.values()) >= 10
