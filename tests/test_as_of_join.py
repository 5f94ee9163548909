"""The per-key as-of join (kw.as_of_join) in a streaming query: against the reference model
(tests/join_model.py: the micro-batch of every row, its version and status) and against Spark's
own batch as-of join of the same rows (the newest version at or before each reading, by
aggregation); the delayed device, whose readings Spark's global watermark would drop, is
joined. Bad input is refused before any query starts, naming the column or option."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from pyspark.errors import IllegalArgumentException
from pyspark.sql import DataFrame, SparkSession, functions as F

import keyed_watermarks as kw

from as_of_join_cases import BATCHES, DELAY, LATENESS, READINGS, S, VERSIONS, at, side
from join_model import Row, run_join_model
from reference_model import run_model
from support import start_to_end


def test_as_of_join_streaming_matches_model_and_spark(spark: SparkSession, workdir: Path) -> None:
    """Run in two parts, restarted from the checkpoint in between: held readings, versions and
    readings watermarks are kept across the restart."""
    readings, versions = side(spark, workdir / "r", READINGS), side(spark, workdir / "v", VERSIONS)
    got: Dict[int, Tuple[int, object, str]] = {}

    def collect(df: DataFrame, batch_id: int) -> None:
        for r in df.collect():
            assert r.temp not in got, f"reading {r.temp} emitted twice"
            got[r.temp] = (batch_id, r.firmware, r.join_status)

    for part in (BATCHES[:3], BATCHES[3:]):
        for rs, vs in part:
            readings.add([(k, at(t), p) for k, t, p in rs])
            versions.add([(k, at(t), p) for k, t, p in vs])
        joined = kw.as_of_join(readings.stream(), versions.stream(), key="device", reading_time="ts",
                               version_time="valid_from", lateness="30 seconds", versions_delay="5 seconds")
        start_to_end(joined.writeStream.foreachBatch(collect), workdir / "cp")

    # Each part ends with Spark's no-data batch (its watermark advanced).
    model = run_join_model(BATCHES[:3] + [((), ())] + BATCHES[3:], LATENESS, DELAY)
    expected = {o.reading[2]: (o.batch, o.version[2] if o.version else None, o.status) for o in model.out}
    assert got == expected
    assert {o.status for o in model.out} == {"joined", "no_version", "late", "invalid"}
    # Held at the end: the readings the versions watermark has not passed (model and query agree above).
    assert sorted(r[2] for rs in model.held.values() for r in rs) == sorted(
        r[2] for rs, _ in BATCHES for r in rs if r[2] not in got)

    # Spark's own batch as-of join of every row: the newest version at or before each reading.
    all_r = spark.createDataFrame([(k, at(t), p) for rs, _ in BATCHES for k, t, p in rs], READINGS)
    all_v = spark.createDataFrame([(k, at(t), p) for _, vs in BATCHES for k, t, p in vs], VERSIONS)
    newest = (all_r.join(all_v, "device").where(F.col("valid_from") <= F.col("ts"))
              .groupBy("temp").agg(F.max_by("firmware", "valid_from").alias("firmware")))
    oracle = {r.temp: r.firmware for r in newest.collect()}
    for temp, (_, firmware, status) in got.items():
        if status in ("joined", "no_version"):
            assert firmware == oracle.get(temp), temp
    # The delayed device's on-time readings are joined, though Spark's global watermark on the
    # readings (max over all devices - 30 s) had passed every one of them when it arrived.
    up = {t: got[t] for t in (5, 7, 8, 11, 14)}
    assert all(s == "joined" for _, _, s in up.values()), up
    assert got[8][1] == "u2" and got[7][1] == "u1"

    # State (Spark's state data source): each key's versions pruned to its horizon, as the model's.
    stored = (spark.read.format("statestore").option("stateVarName", "join_versions")
              .load(str(workdir / "cp")).collect())
    in_state = sorted((r.key[0], r.list_element.row[2]) for r in stored)
    assert in_state == sorted((k, v[2]) for k, vs in model.versions.items() for v in vs)
    assert len(in_state) < sum(len(vs) for _, vs in BATCHES)


def test_as_of_join_then_keyed_window(spark: SparkSession, workdir: Path) -> None:
    """A keyed window stage after the join in one query: its windows are the window model's
    (tests/reference_model.py) over the join model's joined rows, batch by batch."""
    readings, versions = side(spark, workdir / "r", READINGS), side(spark, workdir / "v", VERSIONS)
    for rs, vs in BATCHES:
        readings.add([(k, at(t), p) for k, t, p in rs])
        versions.add([(k, at(t), p) for k, t, p in vs])
    joined = kw.as_of_join(readings.stream(), versions.stream(), key="device", reading_time="ts",
                           version_time="valid_from", lateness="30 seconds", versions_delay="5 seconds")
    windows = (kw.keyed_watermark(joined.where(F.col("join_status") == "joined"), key="device", event_time="ts",
                                  lateness="10 seconds", max_skew="unbounded")
               .window("1 minute").agg(F.count("*").alias("n"), F.max("firmware").alias("firmware")))
    got = []
    start_to_end(windows.writeStream.foreachBatch(lambda df, _: got.extend(df.collect())), workdir / "cp")

    join = run_join_model(BATCHES, LATENESS, DELAY)
    per_batch: List[List[Row]] = [[] for _ in join.watermarks_ms]
    for o in join.out:
        if o.status == "joined":
            per_batch[o.batch].append((o.reading[0], o.reading[1], o.version[2]))
    model = run_model(per_batch, 10 * S, 60 * S, max_skew=None)
    expected = sorted((w.key, w.start, len(w.values), max(w.values)) for w in model.emitted)
    # Collected timestamps are naive local times (pyspark's conversion); .timestamp() reads them back.
    assert sorted((r.device, round(r.window.start.timestamp()) * S, r.n, r.firmware) for r in got) == expected
    assert len(expected) >= 5


def _streams(spark: SparkSession, workdir: Path) -> Tuple[DataFrame, DataFrame]:
    readings, versions = side(spark, workdir / "r", READINGS), side(spark, workdir / "v", VERSIONS)
    readings.add([])
    versions.add([])
    return readings.stream(), versions.stream()


@pytest.mark.quick
def test_as_of_join_refuses_bad_input(spark: SparkSession, workdir: Path) -> None:
    r, v = _streams(spark, workdir)
    args = dict(key="device", reading_time="ts", version_time="valid_from", lateness="10 seconds")

    def refused(match: str, readings: DataFrame = r, versions: DataFrame = v, **kw_args) -> None:
        with pytest.raises(IllegalArgumentException, match=match):
            kw.as_of_join(readings, versions, **{**args, **kw_args})

    refused("key column 'site' is not a column of readings", key=["device", "site"])
    refused("version_time column 'valid' is not a column of versions", version_time="valid")
    refused("key column 'device' is int in readings but string in versions",
            readings=r.withColumn("device", F.col("temp")))
    refused("reading_time column 'ts' of readings is bigint; it must be a TIMESTAMP",
            readings=r.withColumn("ts", F.col("temp").cast("long")))
    refused("column 'firmware' is in both readings", readings=r.withColumn("firmware", F.lit("x")))
    refused("readings already define Spark's watermark", readings=r.withWatermark("ts", "1 minute"))
    refused("versions_delay", versions_delay="-1 second")
    refused("lateness", lateness="soon")
    refused("readings must be a streaming DataFrame", readings=spark.createDataFrame([], READINGS))
