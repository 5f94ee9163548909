"""Shared fixtures: one local SparkSession with the keyed-watermarks jar, and a fresh working
directory per test. Helpers (replaying micro-batches, running a query to the end, time units,
generated streams) are in support.py."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import keyed_watermarks as kw

from support import operator_harness_factory

_counter = itertools.count()

# The longest modules first. dev/test runs the main line's suite on two pytest-xdist workers with
# --dist loadfile --no-loadscope-reorder, which hands out modules in collection order (two each,
# then one per finished module); by default xdist hands out the modules with the most tests
# first, and the run of 0115619 ended on test_spark_upgrades (one test, about 300 s) with the
# other worker idle. Order: the modules' own times on Spark 4.3 in the fresh-clone run of
# b585662 (2026-11-27), longest first; the rest keep their order after them.
LONGEST_MODULES = (
    "test_connect_parity", "test_watermark_policies", "test_kill_recovery", "test_cluster",
    "test_spark_upgrades", "test_wheel", "test_spark_oracle", "test_connect_server",
    "test_policies_in_memory", "test_bad_input", "test_reference_model", "test_outages",
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).stem, len(rank)))  # stable


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
