"""The keyed interval join (kw.interval_join) in a streaming query: against the reference model
(tests/interval_join_model.py: the micro-batch of every row, its pair and status, the rows kept
in state), across a restart from the checkpoint; against Spark's own stream-stream join where the
rules coincide (every key in step, nothing late); followed by a keyed window stage in one query;
and the delayed device, whose rows Spark's
global watermark drops, joined. Bad input is refused before any query starts, naming the
column or option."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest
from pyspark.errors import IllegalArgumentException
from pyspark.sql import DataFrame, SparkSession, functions as F

import keyed_watermarks as kw

from interval_join_cases import AFTER, BATCHES, BEFORE, LATENESS, LEFT, OPTIONS, RIGHT, S, at, s, side
from interval_join_model import Row, run_interval_model
from reference_model import run_model
from support import start_to_end


def _run(spark: SparkSession, workdir: Path, parts: List[List[Tuple[List[Row], List[Row]]]], how: str,
         left_watermark: Optional[str] = None) -> Dict[Tuple[Optional[int], Optional[str]], Tuple[int, str]]:
    """Runs the join over `parts`, restarting from the checkpoint between them; returns each
    output row, (left payload, right payload) -> (micro-batch, status), asserting none twice.
    `left_watermark`: a `withWatermark` on the left input with that delay."""
    left, right = side(spark, workdir / "l", LEFT), side(spark, workdir / "r", RIGHT)
    got: Dict[Tuple[Optional[int], Optional[str]], Tuple[int, str]] = {}

    def collect(df: DataFrame, batch_id: int) -> None:
        for r in df.collect():
            assert (r.temp, r.code) not in got, f"{(r.temp, r.code)} emitted twice"
            got[(r.temp, r.code)] = (batch_id, r.join_status)

    for part in parts:
        for ls, rs in part:
            left.add([(k, at(t), p) for k, t, p in ls])
            right.add([(k, at(t), p) for k, t, p in rs])
        left_stream = left.stream()
        if left_watermark is not None:
            left_stream = left_stream.withWatermark("ts", left_watermark)
        joined = kw.interval_join(left_stream, right.stream(), how=how, **OPTIONS)
        start_to_end(joined.writeStream.foreachBatch(collect), workdir / "cp")
    return got


@pytest.mark.all_versions
def test_interval_join_matches_model_across_restart(spark: SparkSession, workdir: Path) -> None:
    """Left outer, run in two parts restarted from the checkpoint: the rows kept in state and
    each side's watermark per key carry over. Every output row (pair, unmatched, late, invalid)
    in the model's micro-batch; the rows kept in state (Spark's state data source) the model's.
    The left input defines Spark's watermark (1 s), far ahead of the delayed device's rows: the
    join drops none of them."""
    got = _run(spark, workdir, [BATCHES[:3], BATCHES[3:]], "left_outer", left_watermark="1 second")
    # Spark runs a no-data batch after its watermark advanced (the end of the first part): in
    # the model, a batch without rows there.
    model = run_interval_model(BATCHES[:3] + [([], [])] + BATCHES[3:], BEFORE, AFTER, LATENESS, how="left_outer")
    expected = {(o.left[2] if o.left else None, o.right[2] if o.right else None): (o.batch, o.status)
                for o in model.out}
    assert got == expected
    assert {o.status for o in model.out} == {"joined", "unmatched", "late", "invalid"}
    # The delayed device's rows are joined, minutes behind the other devices.
    assert got[(8, "u2")][1] == "joined" and got[(7, "u2")][1] == "joined"

    # Spark's own batch join of every on-time row (late: below its key's side max of earlier
    # batches - lateness, computed here from the input alone): the same pairs.
    on_time = _on_time(BATCHES)
    lefts = spark.createDataFrame([(k, at(t), p) for ls, _ in BATCHES for k, t, p in ls if p in on_time], LEFT)
    rights = spark.createDataFrame([(k, at(t), p) for _, rs in BATCHES for k, t, p in rs if p in on_time], RIGHT)
    pairs = (lefts.join(rights, "device")
             .where(F.col("raised_at").between(F.col("ts") - F.expr("INTERVAL 10 SECONDS"),
                                               F.col("ts") + F.expr("INTERVAL 30 SECONDS"))))
    assert {(r.temp, r.code) for r in pairs.collect()} == {p for p, (_, st) in got.items() if st == "joined"}

    stored = (spark.read.format("statestore").option("stateVarName", "interval_left")
              .load(str(workdir / "cp")).collect())
    assert sorted(r.list_element.row[2] for r in stored) == sorted(
        r[2] for rs in model.held_left.values() for r in rs)
    stored = (spark.read.format("statestore").option("stateVarName", "interval_right")
              .load(str(workdir / "cp")).collect())
    assert sorted(r.list_element.row[2] for r in stored) == sorted(
        r[2] for rs in model.held_right.values() for r in rs)


def test_interval_join_then_keyed_window(spark: SparkSession, workdir: Path) -> None:
    """A keyed window stage after the join in one query: its windows are the window model's
    (tests/reference_model.py) over the join model's pairs, batch by batch (a pair is a row at
    the left row's time)."""
    left, right = side(spark, workdir / "l", LEFT), side(spark, workdir / "r", RIGHT)
    for ls, rs in BATCHES:
        left.add([(k, at(t), p) for k, t, p in ls])
        right.add([(k, at(t), p) for k, t, p in rs])
    pairs = kw.interval_join(left.stream(), right.stream(), how="inner", **OPTIONS)
    windows = (kw.keyed_watermark(pairs.where(F.col("join_status") == "joined"), key="device", event_time="ts",
                                  lateness="10 seconds", max_skew="unbounded")
               .window("30 seconds").agg(F.count("*").alias("n"), F.max("code").alias("code")))
    got = []
    start_to_end(windows.writeStream.foreachBatch(lambda df, _: got.extend(df.collect())), workdir / "cp")

    join = run_interval_model(BATCHES, BEFORE, AFTER, LATENESS, how="inner")
    per_batch: List[List[Row]] = [[] for _ in BATCHES]
    for o in join.out:
        if o.status == "joined":
            per_batch[o.batch].append((o.left[0], o.left[1], o.right[2]))
    model = run_model(per_batch, 10 * S, 30 * S, max_skew=None)
    expected = sorted((w.key, w.start, len(w.values), max(w.values)) for w in model.emitted)
    # Collected timestamps are naive local times (pyspark's conversion); .timestamp() reads them back.
    assert sorted((r.device, round(r.window.start.timestamp()) * S, r.n, r.code) for r in got) == expected
    assert len(expected) >= 3, expected


def _on_time(batches: List[Tuple[List[Row], List[Row]]]) -> Set[object]:
    """The payloads of the rows not late for their key's side: each side's max time per key over
    the earlier batches, minus the lateness."""
    maxima: List[Dict[object, int]] = [{}, {}]
    on_time: Set[object] = set()
    for sides in batches:
        before = [dict(m) for m in maxima]
        for i, rows in enumerate(sides):
            for k, t, p in rows:
                if k is None or t is None:
                    continue
                if k not in before[i] or t >= before[i][k] - LATENESS:
                    on_time.add(p)
                maxima[i][k] = max(maxima[i].get(k, t), t)
    return on_time


def _in_step(n_batches: int) -> List[Tuple[List[Row], List[Row]]]:
    """Three devices in step: each batch, every device a reading and an alarm at nearby times,
    moving forward 20 s a batch, so no row is late for its key or for a global watermark."""
    batches = []
    for b in range(n_batches):
        ls = [(d, s(b * 20 + i), b * 10 + i) for i, d in enumerate("abc")]
        rs = [(d, s(b * 20 + 3 * i + (7 if b % 2 else -4)), f"{d}{b}") for i, d in enumerate("abc")]
        batches.append((ls, rs))
    return batches


def test_in_step_inner_join_equals_spark_stream_stream_join(spark: SparkSession, workdir: Path) -> None:
    """Every key in step and nothing late: Spark's own stream-stream interval join (a watermark
    on each side) and ours give the same pairs."""
    batches = _in_step(6)
    got = _run(spark, workdir / "ours", [batches], "inner")
    ours = {pair for pair, (_, status) in got.items() if status == "joined"}
    assert all(status == "joined" for _, status in got.values())

    left, right = side(spark, workdir / "l", LEFT), side(spark, workdir / "r", RIGHT)
    for ls, rs in batches:
        left.add([(k, at(t), p) for k, t, p in ls])
        right.add([(k, at(t), p) for k, t, p in rs])
    lw = left.stream().withWatermark("ts", "20 seconds").alias("l")
    rw = right.stream().withWatermark("raised_at", "20 seconds").alias("r")
    spark_join = lw.join(rw, F.expr(
        "l.device = r.device AND r.raised_at BETWEEN l.ts - INTERVAL 10 SECONDS AND l.ts + INTERVAL 30 SECONDS"))
    theirs: Set[Tuple[int, str]] = set()
    start_to_end(spark_join.select("l.temp", "r.code").writeStream
                 .foreachBatch(lambda df, _: theirs.update((r.temp, r.code) for r in df.collect())),
                 workdir / "cp-spark")
    assert theirs == ours
    assert len(ours) >= 12


@pytest.mark.quick
def test_interval_join_refuses_bad_input(spark: SparkSession, workdir: Path) -> None:
    left, right = side(spark, workdir / "l", LEFT), side(spark, workdir / "r", RIGHT)
    left.add([])
    right.add([])
    lf, rt = left.stream(), right.stream()

    def refused(match: str, l_df: DataFrame = lf, r_df: DataFrame = rt, **options: str) -> None:
        with pytest.raises(IllegalArgumentException, match=match):
            kw.interval_join(l_df, r_df, **{**OPTIONS, **options})

    refused("how: expected 'inner' or 'left_outer', got 'right_outer'", how="right_outer")
    refused("before", before="-1 second")
    refused("after", after="soon")
    refused("key column 'site' is not a column of left", key=["device", "site"])
    refused("right_time column 'raised' is not a column of right", right_time="raised")
    refused("key column 'device' is int in left but string in right", l_df=lf.withColumn("device", F.col("temp")))
    refused("left_time column 'ts' of left is bigint; it must be a TIMESTAMP",
            l_df=lf.withColumn("ts", F.col("temp").cast("long")))
    refused("column 'code' is in both left and right", l_df=lf.withColumn("code", F.lit("x")))
    refused("right must be a streaming DataFrame", r_df=spark.createDataFrame([], RIGHT))


def test_right_row_alone_with_a_null_key_beside_a_non_nullable_left_key(spark: SparkSession, workdir: Path) -> None:
    """A right row alone (invalid: null key) carries its key in the left side's key column,
    which is nullable in the output when either side's is (here only the right side's)."""
    left, right = side(spark, workdir / "l", LEFT), side(spark, workdir / "r", RIGHT)
    left.add([("a", at(s(10)), 1)])
    right.add([(None, at(s(10)), "n1"), ("a", at(s(12)), "a1")])
    non_null = left.stream().withColumn("device", F.coalesce(F.col("device"), F.lit("?")))
    joined = kw.interval_join(non_null, right.stream(), how="inner", **OPTIONS)
    assert not non_null.schema["device"].nullable and joined.schema["device"].nullable
    got: List[tuple] = []
    start_to_end(joined.writeStream.foreachBatch(lambda df, _: got.extend(df.collect())), workdir / "cp")
    assert sorted((r.device or "", r.temp, r.code, r.join_status) for r in got) == [
        ("", None, "n1", "invalid"), ("a", 1, "a1", "joined")]
