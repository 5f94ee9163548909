"""The same API on a classic and a Spark Connect session gives identical results: for each
feature (tests/connect_scenarios.py), the rows each micro-batch emits (windows, report rows, kept
late and invalid rows), the columns, the per-batch ``kw.metrics`` and input counts; the per-key
joins' rows and columns; and bad input
raises the same pyspark.errors type with the same message, before any query starts.

The classic run is the oracle here (the classic API is checked against Spark's own aggregation
and the reference model elsewhere); what this suite asserts is that Connect changes nothing.

Why the Connect side runs in a child process: a Python process holds a classic pyspark session
or a Connect one, not both. ``builder.remote(...)`` makes pyspark build Connect Columns process-
wide (SPARK_CONNECT_MODE_ENABLED), and ``remote("local[...]")`` refuses to start its in-process
server next to an existing SparkContext. The child runs every scenario on one Connect session
(one JVM), and is started first so that it runs while this process runs the classic side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import connect_scenarios as scenarios
from support import short_lived_jvm_env

pytestmark = pytest.mark.slow  # its own processes (see pytest.ini)

TESTS = Path(__file__).resolve().parent


class _ConnectRun:
    def __init__(self, root: Path) -> None:
        self.result = root / "result.json"
        self.log = root / "connect.log"
        env = short_lived_jvm_env()
        # The server's Python workers (foreachBatch) need this interpreter (with pyspark and
        # keyed_watermarks) and the scenarios module.
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH")) if p)
        env.pop("SPARK_REMOTE", None)
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(TESTS / "connect_scenarios.py"), str(root / "work"), str(self.result)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=root,
            )
        self._data = None

    def get(self) -> dict:
        if self._data is None:
            rc = self.proc.wait(timeout=1800)
            assert rc == 0, self.log.read_text()[-5000:]
            self._data = json.loads(self.result.read_text())
        return self._data


@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    run = _ConnectRun(tmp_path_factory.mktemp("connect"))
    yield run
    if run.proc.poll() is None:
        run.proc.kill()
        run.proc.wait()


@pytest.fixture(scope="module")
def classic(spark, connect, tmp_path_factory):
    # `connect` first: the child process runs while the classic scenarios run here.
    return scenarios.run_all(spark, tmp_path_factory.mktemp("classic"))


def _report_rows(rows_per_batch):
    return [r for rows in rows_per_batch.values() for r in rows if r.get("kw_kind") != "window"]


@pytest.mark.parametrize("name", list(scenarios.QUERIES))
def test_query_results_are_identical(classic, connect, name):
    ours, theirs = classic[name], connect.get()[name]
    assert theirs["columns"] == ours["columns"]
    assert theirs["rows"] == ours["rows"], name
    assert theirs["progress"] == ours["progress"], name
    # The scenario exercises something: windows in more than one batch, and metrics each batch.
    emitting = [b for b, rows in ours["rows"].items() if rows]
    assert len(emitting) >= 2, ours["rows"]
    # Every micro-batch that wrote rows has its progress, whose metrics count the window rows it wrote.
    progress = ours["progress"]
    assert set(ours["rows"]) <= set(progress), (sorted(ours["rows"]), sorted(progress))
    for b, p in progress.items():
        windows = [r for r in ours["rows"].get(b, []) if r.get("kw_kind", "window") == "window"]
        metrics = p["metrics"]["stages"][scenarios.OUTPUT_STAGE[name]] if name in scenarios.OUTPUT_STAGE else p["metrics"]
        assert metrics["windows_emitted"] == len(windows), (name, b)
    if name == "dedup":
        assert sum(p["metrics"]["duplicate_rows"] for p in progress.values()) > 0, "copies dropped"
    if "kw_kind" in ours["columns"]:
        assert _report_rows(ours["rows"]), "the report scenarios have late or invalid rows"
    if "kw_pane" in ours["columns"]:
        _assert_every_pane_kind(ours["rows"])


@pytest.mark.parametrize("name", list(scenarios.JOINS))
def test_join_results_are_identical(classic, connect, name):
    """The per-key joins: the same columns and rows in each micro-batch (the server plugin
    plans them with the same Scala calls as the py4j entry points), and the same metrics, under
    the join's name when it has one (the interval join's travels in the Connect message)."""
    ours, theirs = classic[name], connect.get()[name]
    assert theirs["columns"] == ours["columns"]
    assert theirs["rows"] == ours["rows"], name
    statuses = {r["join_status"] for rows in ours["rows"].values() for r in rows}
    assert "joined" in statuses and len(statuses) >= 2, statuses
    assert theirs["progress"] == ours["progress"], name
    join_name = "pairs" if name == "interval_join" else ""
    for batch, p in ours["progress"].items():
        counts = p["metrics"]["joins"][join_name]
        written = ours["rows"].get(batch, [])
        assert {s: counts[f"{s}_rows"] for s in statuses} == {
            s: sum(1 for r in written if r["join_status"] == s) for s in statuses}, (name, batch)


def _assert_every_pane_kind(rows_per_batch):
    """The early-pane scenario has early, on-time and late panes and retraction rows, and
    every retraction comes in the batch of the pane that replaces it."""
    rows = [r for rows in rows_per_batch.values() for r in rows]
    assert {r["kw_pane"] for r in rows} == {"early", "on_time", "late"}
    assert any(r["kw_retraction"] for r in rows)
    for batch in rows_per_batch.values():
        panes = {(r["device"], r["window"]["start"], r["kw_pane_index"]) for r in batch if not r["kw_retraction"]}
        assert all((r["device"], r["window"]["start"], r["kw_pane_index"]) in panes
                   for r in batch if r["kw_retraction"])


def test_keep_late_rows_with_foreach_batch_is_identical(classic, connect):
    ours, theirs = classic["foreach_batch"], connect.get()["foreach_batch"]
    assert theirs == ours
    assert ours["results"] and ours["late_rows"]
    reasons = {r["kw_reason"] for r in ours["late_rows"]}
    assert len(reasons) >= 2, reasons  # late rows and invalid (null key / null event time) rows
    late_in_metrics = sum(p["metrics"]["late_rows"] for p in ours["progress"].values())
    assert late_in_metrics == sum(1 for r in ours["late_rows"] if r["kw_watermark"] is not None)


@pytest.mark.parametrize("name", list(scenarios.BAD_INPUTS))
def test_bad_input_raises_the_same_error(classic, connect, name):
    ours, theirs = classic["bad_inputs"][name], connect.get()["bad_inputs"][name]
    assert ours["type"] != "no error" and not ours["type"].startswith("unexpected"), ours
    assert theirs == ours


def test_bad_input_starts_no_query(classic, connect):
    assert classic["bad_inputs"]["queries_started"] == 0
    assert connect.get()["bad_inputs"]["queries_started"] == 0
