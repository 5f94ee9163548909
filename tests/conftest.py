"""Shared fixtures: one local SparkSession with the keyed-watermarks jar, and helpers that
replay a list of micro-batches through Spark's file source (one parquet file per batch,
ordered by modification time) and run a query until all of them are processed."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path
from typing import Iterable, List, Sequence

import pytest
from pyspark.sql import DataFrame, Row, SparkSession

import keyed_watermarks as kw

EVENT_SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"
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


class Replay:
    """Writes micro-batches as parquet files for the file source, one file per batch."""

    def __init__(self, spark: SparkSession, root: Path, schema: str = EVENT_SCHEMA) -> None:
        self.spark = spark
        self.root = Path(root)
        self.schema = schema
        self.input_dir = self.root / "input"
        self.input_dir.mkdir(parents=True, exist_ok=True)
        self.batches = 0

    def add(self, rows: Sequence[tuple]) -> None:
        """Adds one micro-batch (possibly empty rows are skipped: no file, no batch)."""
        if not rows:
            return
        i = self.batches
        tmp = self.root / f"tmp-{i}"
        self.spark.createDataFrame(list(rows), self.schema).coalesce(1).write.parquet(str(tmp))
        (part,) = [p for p in tmp.iterdir() if p.name.endswith(".parquet")]
        target = self.input_dir / f"batch-{i:05d}.parquet"
        shutil.move(str(part), target)
        shutil.rmtree(tmp)
        # The file source orders files by modification time.
        os.utime(target, (1_000_000 + i, 1_000_000 + i))
        self.batches += 1

    def add_all(self, batches: Iterable[Sequence[tuple]]) -> None:
        for b in batches:
            self.add(b)

    def stream(self) -> DataFrame:
        return (
            self.spark.readStream.schema(self.schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.input_dir))
        )


def run_to_end(df: DataFrame, out_dir: Path, checkpoint: Path):
    """Runs `df` with Trigger.AvailableNow into a parquet sink until all input is processed;
    returns the finished query (for its progress reports); raises the query's exception."""
    query = (
        df.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out_dir))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    exc = query.exception()
    if exc is not None:
        raise exc
    return query


def run_available(df: DataFrame, out_dir: Path, checkpoint: Path) -> List[Row]:
    """Runs `df` with Trigger.AvailableNow into a parquet sink; returns all rows written so far."""
    run_to_end(df, out_dir, checkpoint)
    return read_output(df.sparkSession, out_dir, df.schema)


def read_output(spark: SparkSession, out_dir: Path, schema) -> List[Row]:
    if not Path(out_dir).exists():
        return []
    return spark.read.schema(schema).parquet(str(out_dir)).collect()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / f"run-{next(_counter)}"
    d.mkdir()
    return d
