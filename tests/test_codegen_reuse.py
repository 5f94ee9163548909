"""Generated code is reused from one micro-batch to the next.

A streaming query turns ``current_timestamp()`` into the batch's timestamp as a literal, and
whole-stage code generation writes primitive literals into the Java source. The ``max_ahead``
check (on by default) compares every row with the batch's processing time, so before
``catalyst.BatchConstant`` every micro-batch had new source and Janino compiled about five
classes per batch (22% of the CPU with 10k-row batches, benchmarks/results/profile.md). Spark
counts its compilations in ``CodegenMetrics``; a second, identical query must find all its code
in Spark's cache, while ``max_ahead`` still applies per batch."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import functions as F

import keyed_watermarks as kw
from support import Replay, run_to_end

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
FUTURE = datetime(9999, 1, 1, tzinfo=timezone.utc)  # beyond max_ahead (a day) of processing time
# Without the fix each batch compiled about five classes (15 in 3 batches): 3 batches tell the two
# apart, and the test runs on every Spark line.
BATCHES = 3


def _batch(b: int):
    rows = [(f"d{i % 3}", T0 + timedelta(seconds=10 * b + i % 10), float(i)) for i in range(30)]
    return rows + [("d0", FUTURE, 0.0)]


def _compilations(spark) -> int:
    return spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME().getCount()


@pytest.mark.all_versions
def test_second_query_compiles_nothing_and_max_ahead_still_applies(spark, workdir):
    replay = Replay(spark, workdir)
    replay.add_all(_batch(b) for b in range(BATCHES))

    def run(name: str):
        result = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="5 seconds")
                  .window("10 seconds").agg(F.count("*").alias("n"), F.avg("temp").alias("avg_temp")))
        return run_to_end(result, workdir / f"out-{name}", workdir / f"checkpoint-{name}")

    run("warm-up")
    before = _compilations(spark)
    query = run("measured")
    compiled = _compilations(spark) - before

    with_data = [p for p in query.recentProgress if p.numInputRows > 0]
    assert len(with_data) == BATCHES
    # Each batch's row dated 9999 is still invalid under that batch's processing time.
    assert [p.observedMetrics["keyed_watermarks_input"]["future_event_time_rows"] for p in with_data] == [1] * BATCHES
    # Before the batch timestamp was kept out of the source: about five per batch.
    assert compiled < BATCHES, f"{compiled} compilations in {BATCHES} micro-batches of an already compiled query"
