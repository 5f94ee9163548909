"""Spark upgrades keep state (docs/semantics.md, "Upgrades"): a checkpoint written on an older
Spark line resumes on every newer line, one line at a time (4.0 -> 4.1 -> 4.2 -> 4.3) or skipping
lines (4.0 -> 4.2 -> 4.3, 4.0 -> 4.3, 4.1 -> 4.3), with the same results as an uninterrupted run,
for tumbling, sliding and session windows, a timer policy (max_skew: event-time timers), the
keyed interval join and the as-of join (its held readings, versions and timers).
A downgrade (a checkpoint last written by 4.3 resumed on 4.0) works too, with the same results.

Runs once, in the main line's suite (not all_versions): the older lines run as subprocesses in
their venvs (dev/venv creates one if it is missing; dev/test would create it later anyway), one
JVM per step with every query in it (tests/state_queries.py); the main line's step runs the same
queries in the suite's own session, with state_queries' settings (one JVM start fewer)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pyspark

import state_queries as sq
from support import short_lived_jvm_env

ROOT = Path(__file__).resolve().parent.parent
WINDOW_KINDS = ["tumbling", "sliding", "session", "timers"]
KINDS = WINDOW_KINDS + ["interval_join", "as_of_join"]
# Files added before each step: two, then one per step (one micro-batch per file).
STAGES = [2, 1, 1, 1, 1]


def venv_python(minor: str) -> str:
    """The python of Spark `minor`'s venv, created by dev/venv if it is missing."""
    venv = subprocess.run([str(ROOT / "dev" / "venv"), minor], cwd=ROOT, check=True, text=True,
                          stdout=subprocess.PIPE).stdout.strip()
    return str(ROOT / venv / "bin" / "python")


def run_on(minor: str, jobs, workdir: Path, spark) -> None:
    """Runs the jobs' queries on Spark `minor`: in one subprocess, or in `spark` when that is
    the running line."""
    if pyspark.__version__.startswith(minor + "."):
        with sq.runner_settings(spark):
            for j in jobs:
                for kind in KINDS:
                    sq.run(spark, kind, Path(j["input"]), Path(j["checkpoint"]) / kind, Path(j["out"]) / kind)
        return
    jobs_file = workdir / f"jobs-{minor}-{len(list(workdir.glob('jobs-*')))}.json"
    jobs_file.write_text(json.dumps([{**j, "kinds": KINDS} for j in jobs]))
    done = subprocess.run([venv_python(minor), str(ROOT / "tests" / "state_queries.py"), str(jobs_file)],
                          cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600,
                          env=short_lived_jvm_env())
    assert done.returncode == 0, f"Spark {minor}:\n{done.stdout}\n{done.stderr[-4000:]}"


def job(workdir: Path, name: str, input_dir: Path):
    return {"input": str(input_dir), "checkpoint": str(workdir / name / "ckpt"), "out": str(workdir / name / "out")}


def copy_run(workdir: Path, source: str, target: str) -> None:
    """A copy of a run (checkpoint and sink: the sink's log must match the checkpoint)."""
    shutil.copytree(workdir / source, workdir / target)


def test_checkpoints_resume_on_every_newer_spark_line_and_on_an_older_one(spark, workdir):
    files = sq.make_files(sum(STAGES))
    input_dir = workdir / "input"
    bounds = [sum(STAGES[:i]) for i in range(len(STAGES) + 1)]

    def add_stage(i: int) -> None:
        sq.write_files(spark, files[bounds[i]:bounds[i + 1]], input_dir, first=bounds[i])

    runs = {name: job(workdir, name, input_dir) for name in
            ("chain", "4.0-4.2-4.3", "4.0-4.3", "4.1-4.3", "down")}
    add_stage(0)
    run_on("4.0", [runs["chain"]], workdir, spark)
    copy_run(workdir, "chain", "4.0-4.2-4.3")
    copy_run(workdir, "chain", "4.0-4.3")
    add_stage(1)
    run_on("4.1", [runs["chain"]], workdir, spark)
    copy_run(workdir, "chain", "4.1-4.3")
    add_stage(2)
    run_on("4.2", [runs["chain"], runs["4.0-4.2-4.3"]], workdir, spark)
    add_stage(3)
    run_on("4.3", [runs["chain"], runs["4.0-4.2-4.3"], runs["4.0-4.3"], runs["4.1-4.3"]], workdir, spark)
    # The keyed stage's record (docs/semantics.md, "Upgrades") written by 4.0's first batch binds
    # on every newer line: each of them resumed against it, and none wrote its own.
    for name in ("chain", "4.0-4.2-4.3", "4.0-4.3", "4.1-4.3"):
        for kind in WINDOW_KINDS:
            record = json.loads((workdir / name / "ckpt" / kind / "state" / "0" / "_keyed_watermarks.json").read_text())
            assert record["batch"] == 0, (name, kind, record)
    copy_run(workdir, "chain", "down")
    # Every line 4.0 -> 4.3, with and without the lines between: as if never interrupted.
    for kind in KINDS:
        sq.run(spark, kind, input_dir, workdir / "full" / "ckpt" / kind, workdir / "full" / "out" / kind)
        expected = sq.window_rows(spark, workdir / "full" / "out" / kind)
        assert len(expected) >= 8, (kind, expected)
        for name in ("chain", "4.0-4.2-4.3", "4.0-4.3", "4.1-4.3"):
            got = sq.window_rows(spark, workdir / name / "out" / kind)
            assert got == expected, (name, kind)

    # Downgrade: a checkpoint last written by 4.3 resumes on 4.0 with new input, and emits what
    # the run on 4.3 emits over the same input (it resumes too: a restart on one line, which
    # test_restart checks against an uninterrupted run).
    add_stage(4)
    run_on("4.0", [runs["down"]], workdir, spark)
    for kind in KINDS:
        sq.run(spark, kind, input_dir, workdir / "full" / "ckpt" / kind, workdir / "full" / "out" / kind)
        expected = sq.window_rows(spark, workdir / "full" / "out" / kind)
        assert sq.window_rows(spark, workdir / "down" / "out" / kind) == expected, ("4.3 -> 4.0", kind)
