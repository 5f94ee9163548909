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
