"""Keyed stages inside pipelines (issue 26; docs/semantics.md, "Keyed stages in a pipeline").

One test per row of the issue's table, each of which failed on the main branch of that time:

1. a stream-static join (inner, left) before the keyed stage; Spark's batch ``groupBy`` over
   the joined rows is the oracle;
2. an upstream ``withWatermark(...).dropDuplicatesWithinWatermark(...)`` before it;
3. Spark's own aggregation after it: refused before the query starts, naming the keyed
   alternative;
4. ``withWatermark`` and a Spark aggregation after it: refused the same way (also with
   ``max_skew="unbounded"``, where it used to run on Spark's global watermark again);
5. a keyed stage per device, then per site over its output (min of sources), in one query:
   the issue's user code, with the site held back by its slowest device.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from hypothesis import given, note
from hypothesis import strategies as st
from pyspark.sql import DataFrame, functions as F

import keyed_watermarks as kw
from policy_model import Policy, run_policy_model
from support import Replay, spark_examples, start_to_end

SCHEMA = "device STRING, ts TIMESTAMP, kwh DOUBLE, seq INT"
UTC = dt.timezone.utc
SITES = [("d0", "s0"), ("d1", "s0"), ("d2", "s1"), ("d3", "s1")]


def at(seconds: float) -> dt.datetime:
    return dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=seconds)


def sites_table(spark) -> DataFrame:
    return spark.createDataFrame(SITES, "device STRING, site STRING")


def collect_batches(df: DataFrame, root: Path) -> Tuple[List[Tuple[int, list]], list]:
    """Runs `df` to the end of its input (AvailableNow); returns (batch id, rows) per micro-batch
    and the progress reports."""
    batches: List[Tuple[int, list]] = []
    query = start_to_end(df.writeStream.foreachBatch(lambda b, i: batches.append((i, b.collect()))),
                         root / "checkpoint")
    return batches, query.recentProgress


def windows_of(rows) -> Dict[tuple, tuple]:
    return {(r["device"], r["window"]["start"]): (r["n"], r["kwh"], r["site"]) for r in rows}


# Per device: two on-time minutes, one late row (d1 at 5 s after its watermark passed 60 s),
# a device missing from the static table (dx), and a last batch that closes [0, 60).
JOIN_BATCHES = [
    [("d0", at(1), 1.0, 1), ("d0", at(12), 2.0, 2), ("d1", at(5), 4.0, 1), ("dx", at(3), 8.0, 1)],
    [("d1", at(70), 1.5, 2), ("d2", at(30), 3.0, 1), ("dx", at(40), 1.0, 2)],
    [("d1", at(5), 100.0, 3), ("d0", at(65), 1.0, 3), ("d2", at(61), 1.0, 2), ("dx", at(62), 1.0, 3)],
]


@pytest.mark.parametrize("how", ["inner", "left"])
def test_stream_static_join_before_the_keyed_stage(spark, workdir: Path, how: str) -> None:
    replay = Replay(spark, workdir, SCHEMA)
    replay.add_all(JOIN_BATCHES)
    joined = replay.stream().join(sites_table(spark), "device", how)
    aggs = (F.count("*").alias("n"), F.sum("kwh").alias("kwh"), F.max("site").alias("site"))
    out = kw.keyed_watermark(joined, key="device", event_time="ts", lateness="0 seconds").window("1 minute").agg(*aggs)
    batches, _ = collect_batches(out, workdir)
    got = windows_of(r for _, rows in batches for r in rows)
    # Oracle: Spark's batch groupBy over the same join, on-time rows only (d1's row at 5 s in
    # the last batch is late: d1's watermark is 70 s), windows whose end each key's watermark
    # passed (its max event time).
    static = [r for b in JOIN_BATCHES[:2] for r in b] + [r for r in JOIN_BATCHES[2] if r[3] != 3 or r[0] != "d1"]
    rows = spark.createDataFrame(static, SCHEMA).join(sites_table(spark), "device", how)
    max_ts = {d: max(r[1] for b in JOIN_BATCHES for r in b if r[0] == d) for d in ("d0", "d1", "d2", "dx")}
    expected = {
        k: v
        for k, v in windows_of(
            rows.groupBy("device", F.window("ts", "1 minute")).agg(*aggs).collect()
        ).items()
        if k[1] + dt.timedelta(minutes=1) <= max_ts[k[0]].replace(tzinfo=None)
    }
    assert expected, "the oracle must close some windows"
    assert got == expected
    assert ("dx" in {k[0] for k in got}) == (how == "left")
    spark_schema = joined.groupBy("device", F.window("ts", "1 minute")).agg(*aggs).schema
    assert [(f.name, f.dataType, f.nullable) for f in out.schema] == [
        (f.name, f.dataType, f.nullable) for f in spark_schema
    ]


def test_upstream_deduplication_within_watermark(spark, workdir: Path) -> None:
    replay = Replay(spark, workdir, SCHEMA)
    # Retransmissions (same device and seq) within a minute; the upstream watermark (Spark's
    # global one, 1 minute) never reaches these rows, so dedup drops only the duplicates.
    replay.add_all(
        [
            [("d0", at(1), 1.0, 1), ("d0", at(1), 1.0, 1), ("d1", at(2), 2.0, 1)],
            [("d0", at(1), 1.0, 1), ("d1", at(2), 2.0, 1), ("d0", at(20), 3.0, 2)],
            [("d0", at(75), 1.0, 3), ("d1", at(70), 1.0, 2)],
        ]
    )
    deduped = replay.stream().withWatermark("ts", "1 minute").dropDuplicatesWithinWatermark(["device", "seq"])
    out = (
        kw.keyed_watermark(deduped, key="device", event_time="ts", lateness="0 seconds")
        .window("1 minute")
        .agg(F.count("*").alias("n"), F.sum("kwh").alias("kwh"))
    )
    batches, _ = collect_batches(out, workdir)
    got = {(r["device"], r["window"]["start"]): (r["n"], r["kwh"]) for _, rows in batches for r in rows}
    assert got == {("d0", at(0).replace(tzinfo=None)): (2, 4.0), ("d1", at(0).replace(tzinfo=None)): (1, 2.0)}


def _per_device(spark, workdir: Path, **options) -> DataFrame:
    replay = Replay(spark, workdir, SCHEMA)
    replay.add([("d0", at(1), 1.0, 1)])
    events = replay.stream().withColumn("site", F.lit("s0"))
    return (
        kw.keyed_watermark(events, key="device", event_time="ts", lateness="0 seconds", **options)
        .window("1 minute")
        .agg(F.count("*").alias("n"), F.max("site").alias("site"))
    )


def _start(df: DataFrame, workdir: Path):
    return (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(workdir / "checkpoint-refused"))
        .outputMode("append")
        .start()
    )


def test_spark_aggregation_after_the_keyed_stage_is_refused(spark, workdir: Path) -> None:
    per_device = _per_device(spark, workdir)
    with pytest.raises(Exception, match=r"kw\.rollup") as refused:
        _start(per_device.groupBy("site", "window").agg(F.sum("n")), workdir)
    assert "keyed" in str(refused.value)


@pytest.mark.parametrize("max_skew", [None, "unbounded"])
def test_spark_watermark_after_the_keyed_stage_is_refused(spark, workdir: Path, max_skew) -> None:
    per_device = _per_device(spark, workdir, **({"max_skew": max_skew} if max_skew else {}))
    with pytest.raises(Exception, match=r"kw\.rollup"):
        rollup = (
            per_device.withColumn("end", F.col("window.end"))
            .withWatermark("end", "0 seconds")
            .groupBy("site", F.window("end", "1 minute"))
            .agg(F.sum("n"))
        )
        _start(rollup, workdir)


def test_keyed_stage_over_a_keyed_stage_in_one_query(spark, workdir: Path) -> None:
    """The issue's user code: devices per minute, then sites per minute with min of sources."""
    replay = Replay(spark, workdir, SCHEMA)
    replay.add_all(
        [
            [("d0", at(0), 1.0, 1), ("d0", at(10), 1.0, 2), ("d1", at(5), 2.0, 1), ("d2", at(20), 4.0, 1)],
            [("d0", at(95), 1.0, 3), ("d1", at(95), 1.0, 2), ("d2", at(95), 1.0, 2)],
            # d1 is silent: its minute [60, 120) stays open, so site s0 is held back by it.
            [("d0", at(160), 1.0, 4), ("d2", at(160), 1.0, 3)],
            [("d1", at(160), 1.0, 3)],
        ]
    )
    events = replay.stream()
    site_of_device = F.when(F.col("device").isin("d0", "d1"), "s0").otherwise("s1")
    per_device = (
        kw.keyed_watermark(events, key="device", event_time="ts", lateness="30 seconds")
        .window("1 minute")
        .agg(F.count("*").alias("n"), F.sum("kwh").alias("kwh"))
    )
    per_site = (
        kw.keyed_watermark(
            per_device.withColumn("site", site_of_device).withColumn("t", F.col("window.start")),
            key="site",
            event_time="t",
            lateness="0 seconds",
            source="device",
        )
        .window("1 minute")
        .agg(F.sum("n").alias("n"), F.sum("kwh").alias("kwh"))
    )
    batches, progress = collect_batches(per_site, workdir)
    emitted = {(r["site"], r["window"]["start"]): (i, r["n"], r["kwh"]) for i, rows in batches for r in rows}
    minute0 = at(0).replace(tzinfo=None)
    assert set(emitted) == {("s0", minute0), ("s1", minute0)}
    assert emitted[("s1", minute0)][1:] == (1, 4.0)
    assert emitted[("s0", minute0)][1:] == (3, 4.0)
    # s1 closes when its one device's minute [60, 120) reaches it; s0 only once d1's does.
    assert emitted[("s1", minute0)][0] < emitted[("s0", minute0)][0]
    # The site stage follows the global watermark the device stage defined (its lag metrics are
    # measured from it: stuck_keys is null without one), and both stages report their counts.
    stages = [kw.metrics(p).get("stages", {}) for p in progress]
    assert any(s.get("site", {}).get("stuck_keys") is not None for s in stages)
    assert sum(s["site"]["windows_emitted"] for s in stages if "site" in s) == 2
    assert sum(s[""]["input_rows"] for s in stages if "" in s) == 10


# ---- kw.rollup against a two-stage model -------------------------------------------------
SECOND = 1_000_000
DEVICE_WINDOW_S, SITE_WINDOW_S, DEVICE_LATENESS_S = 10, 30, 5
SITE_OF = {"d0": "s0", "d1": "s0", "d2": "s0", "d3": "s1"}
BASE_US = 1_700_000_010 * SECOND  # aligned to both window sizes


def model_rollup(batches):
    """Stage 1: tests/policy_model.py per device (bounded lateness, max_skew unbounded). Stage 2:
    each window stage 1 emits in batch N is a row of batch N for its site, at the window's start,
    its device the source; min of the sources seen so far, lateness 0 (the same model)."""
    devices = run_policy_model(
        [[(d, t, kwh, None, None) for d, t, kwh in b] for b in batches],
        DEVICE_WINDOW_S * SECOND,
        Policy(DEVICE_LATENESS_S * SECOND, max_skew=None),
    )
    site_batches = [[] for _ in batches]
    for device, start, _end, n, values in devices.emitted:
        site_batches[n].append((SITE_OF[device], start, (len(values), sum(values)), None, device))
    sites = run_policy_model(site_batches, SITE_WINDOW_S * SECOND, Policy(0, sources=[], max_skew=None))
    return devices, sites


@st.composite
def device_stream(draw):
    """Micro-batches of (device, micros, kwh): per-device clocks moving on (a few steps back)."""
    clock = {d: BASE_US + draw(st.integers(0, 20)) * SECOND for d in SITE_OF}
    events = draw(
        st.lists(
            st.tuples(st.sampled_from(sorted(SITE_OF)), st.sampled_from([0, 2, 4, 7, 9, 12, 15, -3, -8]), st.integers(0, 9)),
            min_size=8,
            max_size=40,
        )
    )
    rows = []
    for device, step, kwh in events:
        clock[device] += step * SECOND
        rows.append((device, clock[device], kwh))
    cuts = sorted(set(draw(st.lists(st.integers(1, len(rows) - 1), min_size=2, max_size=5))))
    bounds = [0] + cuts + [len(rows)]
    return [rows[a:b] for a, b in zip(bounds, bounds[1:])]


@pytest.mark.all_versions
@spark_examples(3)
@given(batches=device_stream())
def test_rollup_matches_two_stage_model(spark, tmp_path_factory, batches) -> None:
    devices, sites = model_rollup(batches)
    note(f"devices={devices.emitted} sites={sites.emitted} late={sites.late}")
    root = tmp_path_factory.mktemp("rollup")
    replay = Replay(spark, root, "device STRING, ts TIMESTAMP, kwh BIGINT")
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    replay.add_all([[(d, epoch + dt.timedelta(microseconds=t), kwh) for d, t, kwh in b] for b in batches])
    per_device = (
        kw.keyed_watermark(
            replay.stream(), key="device", event_time="ts", lateness=f"{DEVICE_LATENESS_S} seconds", max_skew="unbounded"
        )
        .window(f"{DEVICE_WINDOW_S} seconds")
        .agg(F.count("*").alias("n"), F.sum("kwh").alias("kwh"))
    )
    site_table = per_device.sparkSession.createDataFrame(sorted(SITE_OF.items()), "device STRING, site STRING")
    per_site = (
        kw.rollup(per_device.join(site_table, "device"), key="site", source="device", max_skew="unbounded")
        .window(f"{SITE_WINDOW_S} seconds")
        .agg(F.sum("n").alias("n"), F.sum("kwh").alias("kwh"), F.count("*").alias("device_windows"))
    )
    batches_out, progress = collect_batches(per_site, root)
    got = sorted(
        (r["site"], _micros(r["window"]["start"]), i, r["n"], r["kwh"], r["device_windows"])
        for i, rows in batches_out
        for r in rows
    )
    want = sorted(
        (site, start, n, sum(v[0] for v in values), sum(v[1] for v in values), len(values))
        for site, start, _end, n, values in sites.emitted
    )
    assert got == want
    # Both stages' counts, by stage name: the first unnamed, the rollup named after its key.
    stages = [kw.metrics(p)["stages"] for p in progress]
    assert sum(s["site"]["windows_emitted"] for s in stages) == len(sites.emitted)
    assert sum(s[""]["windows_emitted"] for s in stages) == len(devices.emitted)
    assert sum(s["site"]["late_rows"] for s in stages) == sum(sites.late.values())
    assert sum(s[""]["input_rows"] for s in stages) == sum(len(b) for b in batches)


def _micros(t: dt.datetime) -> int:
    return (t.replace(tzinfo=UTC) - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)


def test_stage_names_and_watermark_upstream_are_checked(spark, workdir: Path) -> None:
    """Planning only (no query runs): a stage name taken upstream or not a plain word is refused,
    and so is a skew bound over a stateful operator without a watermark to follow."""
    replay = Replay(spark, workdir, SCHEMA)
    replay.add([("d0", at(1), 1.0, 1)])
    first = (
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="0 seconds", name="devices")
        .window("1 minute")
        .agg(F.count("*").alias("n"))
    )
    with pytest.raises(Exception, match=r"name: a keyed stage upstream is already named 'devices'"):
        kw.rollup(first, key="device", source="device", name="devices").window("1 minute").agg(F.sum("n"))
    with pytest.raises(Exception, match=r"name: a keyed stage's name is letters"):
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="0 seconds", name="a-b").window(
            "1 minute"
        ).agg(F.count("*"))
    unbounded = (
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="0 seconds", max_skew="unbounded")
        .window("1 minute")
        .agg(F.count("*").alias("n"))
    )
    with pytest.raises(Exception, match=r"max_skew='unbounded'"):
        kw.rollup(unbounded, key="device", source="device").window("1 minute").agg(F.sum("n"))
    kw.rollup(unbounded, key="device", source="device", max_skew="unbounded").window("1 minute").agg(F.sum("n"))


def test_union_and_from_json_before_the_keyed_stage(spark, workdir: Path) -> None:
    """The join test's stream through a union of two sources, and as JSON strings parsed by
    ``from_json``: the same windows as the stream without them, which Spark's batch ``groupBy``
    over its on-time rows gives. The three queries run at once (one wait for all)."""
    plain, first, second, text = (Replay(spark, workdir / n, s) for n, s in [
        ("plain", SCHEMA), ("a", SCHEMA), ("b", SCHEMA), ("json", "value STRING")])
    for rows in JOIN_BATCHES:
        plain.add(rows)
        # Every batch has rows in both sources, so the union's micro-batches are the plain ones.
        first.add([r for r in rows if r[0] in ("d0", "d2")])
        second.add([r for r in rows if r[0] in ("d1", "dx")])
        text.add([(json.dumps({"device": d, "ts": t.isoformat(), "kwh": k, "seq": s}),) for d, t, k, s in rows])
    parsed = text.stream().select(F.from_json("value", SCHEMA).alias("e")).select("e.*")
    inputs = {"plain": plain.stream(), "union": first.stream().unionByName(second.stream()), "from_json": parsed}
    aggs = (F.count("*").alias("n"), F.sum("kwh").alias("kwh"))
    got: Dict[str, list] = {name: [] for name in inputs}
    queries = [
        kw.keyed_watermark(events, key="device", event_time="ts", lateness="0 seconds").window("1 minute").agg(*aggs)
        .writeStream.foreachBatch(lambda b, _, out=got[name]: out.extend(b.collect()))
        .option("checkpointLocation", str(workdir / f"checkpoint-{name}")).trigger(availableNow=True).start()
        for name, events in inputs.items()
    ]
    for q in queries:
        q.awaitTermination()
        assert q.exception() is None, q.exception()
    # Oracle: d1's row at 5 s in the last batch is late (d1's watermark is 70 s); a window is
    # emitted once its key's watermark (max event time) passed its end.
    on_time = [r for b in JOIN_BATCHES[:2] for r in b] + [r for r in JOIN_BATCHES[2] if r[3] != 3 or r[0] != "d1"]
    max_ts = {d: max(r[1] for b in JOIN_BATCHES for r in b if r[0] == d) for d in ("d0", "d1", "d2", "dx")}
    oracle = spark.createDataFrame(on_time, SCHEMA).groupBy("device", F.window("ts", "1 minute")).agg(*aggs)
    expected = sorted(tuple(r) for r in oracle.collect()
                      if r["window"]["end"] <= max_ts[r["device"]].replace(tzinfo=None))
    assert len(expected) == 4
    for name, rows in got.items():
        assert sorted(map(tuple, rows)) == expected, name
