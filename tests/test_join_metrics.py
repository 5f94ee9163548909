"""The per-batch metrics of the per-key joins (``observedMetrics["keyed_watermarks_join"]``,
docs/joins.md, "Metrics"), micro-batch by micro-batch, against the joins' reference models
(tests/interval_join_model.py, tests/join_model.py): the rows of each status, the keys handled,
the most rows a key holds, and how far the keys' watermarks trail the highest (quantiles by
Spark's own ``percentile_approx`` over the model's watermarks). Two joins in one query need two
names, and a taken or malformed name is refused before the query starts."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Hashable, List, Optional, Sequence, Tuple

import pytest
from pyspark.errors import IllegalArgumentException
from pyspark.sql import SparkSession, functions as F

import keyed_watermarks as kw

import as_of_join_cases as asof
import interval_join_cases as interval
from interval_join_model import run_interval_model
from join_model import run_join_model
from support import start_to_end

Batches = Sequence[Tuple[Sequence[tuple], Sequence[tuple]]]


def _progress_metrics(query, name: str = "keyed_watermarks_join") -> Dict[int, dict]:
    return {p.batchId: p.observedMetrics[name].asDict() for p in query.recentProgress if name in p.observedMetrics}


def _lags(spark: SparkSession, watermarks: List[int]) -> Dict[str, Optional[float]]:
    """The lag metrics of a batch's key watermarks (micros): the highest minus each, in seconds,
    the quantiles by Spark's percentile_approx over the watermarks (accuracy 10000)."""
    names = ("watermark_lag_min_s", "watermark_lag_p50_s", "watermark_lag_p95_s", "watermark_lag_max_s")
    if not watermarks:
        return dict.fromkeys(names)
    top = max(watermarks)
    w = spark.createDataFrame([(x,) for x in watermarks], "w LONG")
    p50, p05 = w.agg(F.percentile_approx("w", 0.5, 10000), F.percentile_approx("w", 0.05, 10000)).first()
    return dict(zip(names, (0.0, (top - p50) / 1e6, (top - p05) / 1e6, (top - min(watermarks)) / 1e6)))


def _keys_with_rows(batch: Tuple[Sequence[tuple], Sequence[tuple]]) -> set:
    return {r[0] for rows in batch for r in rows if r[0] is not None}


def _max_time(batches: Batches, side: int, key: Hashable) -> Optional[int]:
    """A key's max time on a side over `batches` (late rows included: they show the side's progress too)."""
    times = [r[1] for b in batches for r in b[side] if r[0] == key and r[1] is not None]
    return max(times) if times else None


def test_interval_join_metrics_match_model(spark: SparkSession, workdir: Path) -> None:
    """Every micro-batch's metrics of a left outer interval join are the model's: each status's
    rows; the keys with rows; the most rows one of them keeps; the lags of their watermarks (a
    key's: its lower side max minus the lateness; none before both sides have a row)."""
    batches = interval.BATCHES
    left, right = interval.side(spark, workdir / "l", interval.LEFT), interval.side(spark, workdir / "r", interval.RIGHT)
    for ls, rs in batches:
        left.add([(k, interval.at(t), p) for k, t, p in ls])
        right.add([(k, interval.at(t), p) for k, t, p in rs])
    joined = kw.interval_join(left.stream(), right.stream(), how="left_outer", **interval.OPTIONS)
    query = start_to_end(joined.writeStream.format("noop"), workdir / "cp")
    got = _progress_metrics(query)
    assert sorted(got) == list(range(len(batches)))  # no no-data batch: the join has no timers

    model = run_interval_model(batches, interval.BEFORE, interval.AFTER, interval.LATENESS, how="left_outer")
    for n in range(len(batches)):
        after = run_interval_model(batches[: n + 1], interval.BEFORE, interval.AFTER, interval.LATENESS,
                                   how="left_outer")
        keys = _keys_with_rows(batches[n])
        held = {k: len(after.held_left.get(k, [])) + len(after.held_right.get(k, [])) for k in keys}
        watermarks = []
        for k in keys:
            ml, mr = _max_time(batches[: n + 1], 0, k), _max_time(batches[: n + 1], 1, k)
            if ml is not None and mr is not None:
                watermarks.append(min(ml, mr) - interval.LATENESS)
        expected = {f"{st}_rows": sum(1 for o in model.out if o.batch == n and o.status == st)
                    for st in ("joined", "unmatched", "late", "invalid")}
        expected.update(keys_in_batch=len(keys), held_rows_max=max(held.values(), default=0),
                        **_lags(spark, watermarks))
        assert got[n] == expected, n
    # The metrics saw each kind of row and a key trailing the others by minutes.
    assert all(sum(m[f"{st}_rows"] for m in got.values()) > 0 for st in ("joined", "unmatched", "late", "invalid"))
    assert max(m["watermark_lag_max_s"] or 0 for m in got.values()) >= 300


def test_as_of_join_metrics_match_model(spark: SparkSession, workdir: Path) -> None:
    """Every micro-batch's metrics of the as-of join, the last (Spark's no-data batch, where a
    timer releases held readings) included, are the model's: the keys handled are those with
    rows, or whose held readings the versions watermark released; a key holds its held readings
    and its versions; its watermark is its max reading time minus the lateness."""
    batches = asof.BATCHES
    readings, versions = asof.side(spark, workdir / "r", asof.READINGS), asof.side(spark, workdir / "v", asof.VERSIONS)
    for rs, vs in batches:
        readings.add([(k, asof.at(t), p) for k, t, p in rs])
        versions.add([(k, asof.at(t), p) for k, t, p in vs])
    joined = kw.as_of_join(readings.stream(), versions.stream(), key="device", reading_time="ts",
                           version_time="valid_from", lateness="30 seconds", versions_delay="5 seconds")
    query = start_to_end(joined.writeStream.format("noop"), workdir / "cp")
    got = _progress_metrics(query)
    all_batches = list(batches) + [((), ())]  # Spark's no-data batch after its watermark advanced
    assert sorted(got) == list(range(len(all_batches)))

    model = run_join_model(batches, asof.LATENESS, asof.DELAY)
    statuses = ("joined", "no_version", "late", "invalid")
    released_in_batch = {n: {o.reading[0] for o in model.out if o.batch == n and o.status in ("joined", "no_version")}
                         for n in range(len(all_batches))}
    for n in range(len(all_batches)):
        after = run_join_model(all_batches[: n + 1], asof.LATENESS, asof.DELAY, extra_batches=0)
        keys = _keys_with_rows(all_batches[n]) | released_in_batch[n]
        held = {k: len(after.held.get(k, [])) + len(after.versions.get(k, [])) for k in keys}
        watermarks = [m - asof.LATENESS for m in (_max_time(all_batches[: n + 1], 0, k) for k in keys) if m is not None]
        expected = {f"{st}_rows": sum(1 for o in model.out if o.batch == n and o.status == st) for st in statuses}
        expected.update(keys_in_batch=len(keys), held_rows_max=max(held.values(), default=0),
                        **_lags(spark, watermarks))
        assert got[n] == expected, n
    # The no-data batch released held readings: a key handled by its timer alone.
    assert got[len(batches)]["keys_in_batch"] > 0 and not _keys_with_rows(all_batches[-1])


def test_two_joins_in_one_query_have_two_names(spark: SparkSession, workdir: Path) -> None:
    """An as-of join feeding an interval join: the first keeps the plain name, the second
    defaults to its key columns; a name taken upstream, or not letters, digits and '_', is
    refused before the query starts, naming the option. Both observations are in the progress."""
    readings, versions = asof.side(spark, workdir / "r", asof.READINGS), asof.side(spark, workdir / "v", asof.VERSIONS)
    alarms = interval.side(spark, workdir / "a", interval.RIGHT)
    rs, vs = asof.BATCHES[0]
    readings.add([(k, asof.at(t), p) for k, t, p in rs])
    versions.add([(k, asof.at(t), p) for k, t, p in vs])
    alarms.add([("a", asof.at(asof.T0 + 12 * asof.S), "x")])
    first = kw.as_of_join(readings.stream(), versions.stream(), key="device", reading_time="ts",
                          version_time="valid_from", lateness="30 seconds").drop("join_status")
    second_options = dict(key="device", left_time="ts", right_time="raised_at", before="10 seconds",
                          after="10 seconds", lateness="10 seconds")
    named = kw.as_of_join(readings.stream(), versions.stream(), key="device", reading_time="ts",
                          version_time="valid_from", lateness="30 seconds", name="fw").drop("join_status")
    with pytest.raises(IllegalArgumentException, match="name: a join upstream is already named 'fw'"):
        kw.interval_join(named, alarms.stream(), name="fw", **second_options)
    with pytest.raises(IllegalArgumentException, match="name: a join's name is letters, digits and '_'"):
        kw.interval_join(first, alarms.stream(), name="alarms-join", **second_options)
    both = kw.interval_join(first, alarms.stream(), **second_options)
    query = start_to_end(both.writeStream.format("noop"), workdir / "cp")
    first_batch = query.recentProgress[0].observedMetrics
    assert {"keyed_watermarks_join", "keyed_watermarks_join.device"} <= set(first_batch)
    # The readings of the first batch are held (no versions watermark yet): the as-of join
    # handled "a" and "b" and "up" (a version), the interval join only "a" (its alarm).
    assert first_batch["keyed_watermarks_join"]["keys_in_batch"] == 3
    assert first_batch["keyed_watermarks_join.device"]["keys_in_batch"] == 1
