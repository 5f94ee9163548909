"""Shared fixtures: one local SparkSession with the keyed-watermarks jar, and a fresh working
directory per test. Helpers (replaying micro-batches, running a query to the end, time units,
generated streams) are in support.py."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import keyed_watermarks as kw

from support import operator_harness_factory

_counter = itertools.count()

# Each module's test time in the last measured run of the main line's suite (dev/module-durations
# writes it from that run's JUnit report). Read only to order the modules, longest first.
MODULE_DURATIONS = Path(__file__).resolve().parent / "module_durations.json"
# A module missing from the table (new since it was written) is placed as if it took this long.
UNMEASURED_MODULE_S = 30.0


def pytest_collection_modifyitems(config, items):
    """Modules longest first, each module's tests in their own order.

    dev/test runs the main line's suite on two pytest-xdist workers with ``--dist loadfile
    --no-loadscope-reorder``: a worker takes the next module in collection order when it runs
    low. xdist's default order (most tests first) left the one-test modules that start their own
    JVMs (test_spark_upgrades, test_kill_recovery, test_demo: 100-270 s each) to the end, where one
    worker ran them while the other had finished: in the fresh-clone run of 64eedc9 the suite's
    wall time was 1,441 s against 1,325 s for half its tests' time. Longest first is the classic
    greedy schedule for two machines (CONTRIBUTING.md, "CI time")."""
    if not MODULE_DURATIONS.exists():
        return
    durations = json.loads(MODULE_DURATIONS.read_text())
    first_seen = {}
    for item in items:
        first_seen.setdefault(item.nodeid.split("::")[0], len(first_seen))

    def module_key(item):
        module = item.nodeid.split("::")[0]
        return (-durations.get(Path(module).stem, UNMEASURED_MODULE_S), first_seen[module])

    items.sort(key=module_key)  # stable: a module's tests keep their order


def changelog_checkpointing() -> str:
    """RocksDB changelog checkpointing for the session (env KW_CHANGELOG, ``on`` by default):
    ./dev/test runs the main line's suite with it on and the other lines' with it off, so both
    state-store write paths (a snapshot per batch, or a changelog between snapshots) are tested."""
    value = os.environ.get("KW_CHANGELOG", "on")
    if value not in ("on", "off"):
        raise ValueError(f"KW_CHANGELOG: expected 'on' or 'off', got {value!r}")
    return "true" if value == "on" else "false"


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("keyed-watermarks-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", changelog_checkpointing())
    )
    session = kw.configure(builder).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / f"run-{next(_counter)}"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def harness(spark):
    """A factory of in-memory operators (support.operator_harness_factory)."""
    return operator_harness_factory(spark)
