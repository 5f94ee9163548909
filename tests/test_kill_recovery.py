"""Killed with SIGKILL at arbitrary moments, a keyed-watermark query restarted from its
checkpoint loses no window and emits none twice: its output is exactly the reference model's
(tests/reference_model.py) for the same micro-batches. With Spark's parquet sink (exactly once
through its metadata log) and RocksDB changelog checkpointing, and with an idempotent
``foreachBatch`` (each micro-batch overwrites its own output) and full snapshots.

Both queries run side by side in one process (tests/kill_queries.py), one micro-batch after
another; the test kills the process once both have committed a few micro-batches (the next ones
are then usually in flight), and then lets them process the rest. One process for both: each
kill and restart costs a Spark start-up, about a minute on the 2-core CI machine.
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
from support import SECOND, Replay, four_device_batches, short_lived_jvm_env, ts

pytestmark = pytest.mark.slow  # its own processes (see pytest.ini)

HERE = Path(__file__).resolve().parent


def committed(checkpoint: Path) -> int:
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def start(workdir: Path, trigger: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(HERE / "kill_queries.py"), str(workdir / "input"), str(workdir / "runs"), trigger],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=short_lived_jvm_env())


def changelog_files(checkpoint: Path) -> int:
    return len(list((checkpoint / "state").rglob("*.changelog")))


def test_kill_9_loses_and_duplicates_no_window(spark, workdir):
    batches = four_device_batches(seed=17)
    Replay(spark, workdir).add_all([[(k, ts(t), v) for k, t, v in b] for b in batches])
    model = run_model(batches, 2 * SECOND, 10 * SECOND)
    checkpoints = {v: workdir / "runs" / v / "checkpoint" for v in ("parquet-on", "foreach-off")}

    proc = start(workdir, "continuous")
    deadline = time.monotonic() + 600
    while min(committed(c) for c in checkpoints.values()) < 3 and proc.poll() is None:
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()[-3000:]
    proc.kill()  # SIGKILL: no shutdown hook, no state store close, no commit
    proc.wait()
    at_kill = {v: committed(c) for v, c in checkpoints.items()}
    assert all(n < len(batches) for n in at_kill.values()), at_kill  # killed before the end
    proc = start(workdir, "available")
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err[-3000:]
    # The two variants' state stores differ as named: changelog files with it on, none without.
    assert changelog_files(checkpoints["parquet-on"]) > 0
    assert changelog_files(checkpoints["foreach-off"]) == 0

    want = Counter((w.key, w.start, len(w.values), float(sum(w.values))) for w in model.emitted)
    assert sum(want.values()) >= 10
    for variant in checkpoints:
        out = spark.read.parquet(str(workdir / "runs" / variant / "out"))
        got = Counter((r.device, r.start, r.n, r.s) for r in out.select(
            "device", F.unix_micros("window.start").alias("start"), "n", "s").collect())
        lost, duplicated = want - got, got - want
        assert (sum(lost.values()), sum(duplicated.values())) == (0, 0), (variant, at_kill, lost, duplicated)
