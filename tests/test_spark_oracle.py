"""Spark itself as the oracle (docs/semantics.md, "Emission and eviction" and "How this
differs from Spark's global watermark").

a) Batch oracle: a seeded random multi-key stream with out-of-order and late rows. Every
   window our operator emits must equal Spark's *batch*
   ``groupBy(device, window(ts, S)).agg(...)`` over that window's on-time rows, for a long list
   of built-in aggregates; on-time is decided by a tiny pure-Python version of the contract's
   rule. The result schema must equal Spark's.
b) Streaming oracle: streams that neither rule calls late (single key, and a composite key
   whose keys advance together) give row-for-row the same output as Spark's own
   ``withWatermark(...).groupBy(..., window(...)).agg(...)`` in append mode, once both have
   processed the whole stream with Trigger.AvailableNow.
c) Divergence (documentation): a slow batch-uploader key loses its rows to Spark's global
   watermark, ours keeps them.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import pytest
from pyspark.errors import IllegalArgumentException
from pyspark.sql import DataFrame, functions as F

import keyed_watermarks as kw
from support import BASE, SECOND, Replay, executed_plan, run_to_end, ts

# The fast layer: ./dev/test --quick runs the tests marked quick (pytest.ini).
pytestmark = pytest.mark.quick

SIZE = "10 seconds"
SIZE_US = 10 * SECOND
LATENESS = "5 seconds"
LATENESS_US = 5 * SECOND
UTC = dt.timezone.utc


def window_start(us: int) -> int:
    return us - ((us % SIZE_US) + SIZE_US) % SIZE_US


def run(df: DataFrame, root: Path, name: str) -> Tuple[DataFrame, list, str]:
    """Runs `df` with Trigger.AvailableNow into a parquet sink. Returns the sink's content (as a
    batch DataFrame with an extra `ws_us` column, the window start in microseconds), the
    query's progress reports and its last executed plan."""
    out, checkpoint = root / f"{name}-out", root / f"{name}-checkpoint"
    query = run_to_end(df, out, checkpoint)
    written = df.sparkSession.read.schema(df.schema).parquet(str(out))
    return written.withColumn("ws_us", F.unix_micros("window.start")), query.recentProgress, executed_plan(query)


def partials_path(plan: str) -> str:
    """How a query's plan runs its partial aggregation: 'hash-aggregate' (Spark's own
    HashAggregateExec, for fixed-width payloads) or 'on-heap'."""
    return re.search(r"KeyedPartialAggregate .* partials=([a-z-]+)", plan).group(1)


def close(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == pytest.approx(b, rel=1e-9, abs=1e-9)
    return a == b


# =========================================================================================
# a) Batch oracle
# =========================================================================================

ORACLE_SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, label STRING, wtag STRING"


def fixed_width_aggs() -> list:
    """Aggregates whose buffers are all fixed-width (numbers), so the partials are Spark's
    HashAggregateExec's; approx_count_distinct is an imperative aggregate there.
    Left un-aliased on purpose: the generated column names are part of the contract."""
    return [
        F.count("*"),
        F.count("temp"),
        F.sum("temp"),
        F.avg("temp"),
        F.min("temp"),
        F.max("temp"),
        F.max("ts"),
        # first/last depend on row order, which neither a stream nor a shuffle fixes: first/last
        # of `temp` are only checked to be one of the window's on-time values (ORDER_DEPENDENT).
        F.first("temp"),
        F.last("temp"),
        F.stddev("temp"),
        F.variance("temp"),
        F.approx_count_distinct("label"),
        F.sum("temp") / F.count("*"),
    ]


def oracle_aggs() -> list:
    """All kinds of aggregates: the fixed-width ones plus object and string buffers (the
    partials are then held on the heap)."""
    return fixed_width_aggs() + [
        # `wtag` is constant within a (device, window), so first/last of it are deterministic;
        # this is also the string first/last.
        F.first("wtag"),
        F.last("wtag"),
        F.percentile_approx("temp", 0.5),
        # Order-dependent too: compared sorted (see UNORDERED).
        F.collect_list("temp"),
        F.collect_set("label"),
        F.min("label"),
        F.max("label"),
    ]


ORDER_DEPENDENT = {"first(temp)", "last(temp)"}
UNORDERED = {"collect_list(temp)", "collect_set(label)"}


def generate(seed: int, batches: int = 7) -> List[List[tuple]]:
    """Micro-batches of (device, t_us, temp, label) for three devices: two regular ones and a
    sparse one, rows out of order within and across batches, some rows far behind their
    device (most of them late), and a hand-made `edge` device that hits the exact boundary
    `window end == wm`."""
    rng = random.Random(seed)
    cursor = {"d0": BASE, "d1": BASE + 3 * SECOND, "d2": BASE + 7 * SECOND}
    out: List[List[tuple]] = []
    for b in range(batches):
        rows = []
        for device in cursor:
            if device == "d2" and rng.random() < 0.5:
                continue  # d2 is sparse: skips about half of the batches
            cursor[device] += rng.randint(3 * SECOND, 12 * SECOND)
            for _ in range(rng.randint(2, 6)):
                t = cursor[device] + rng.randint(-6 * SECOND, 2 * SECOND)
                rows.append((device, t))
            if rng.random() < 0.5:
                rows.append((device, cursor[device] - rng.randint(12 * SECOND, 30 * SECOND)))
        rows = [
            (d, t, None if rng.random() < 0.1 else round(rng.uniform(-10, 40), 2), f"L{rng.randint(0, 30):02d}")
            for d, t in rows
        ]
        rng.shuffle(rows)
        out.append(rows)
    # Edge device. Batch 0: max 115 s, so wm = 110 s at the start of batch 1. Batch 1: 105 s
    # and 109.999999 s are in [100, 110), end 110 <= 110: late; 110 s is in [110, 120): on
    # time. Batch 2 moves the watermark to 127 s, closing [110, 120).
    edge = [
        [100 * SECOND, 115 * SECOND],
        [105 * SECOND, 110 * SECOND - 1, 110 * SECOND],
        [132 * SECOND],
    ]
    for b, times in enumerate(edge):
        out[b].extend(("edge", BASE + t, float(i), f"E{i}") for i, t in enumerate(times))
    return out


def contract(batches: Sequence[Sequence[tuple]]):
    """The contract's rule in plain Python: per key and batch, a row is late iff its window's
    end <= (max event time of the key's earlier batches) - lateness. Returns the on-time rows,
    the expected late report rows (device, n, wm at start), the number of late rows of each
    batch and each key's final watermark."""
    max_seen: Dict[str, int] = {}
    on_time, late_reports, per_batch = [], [], []
    for rows in batches:
        wm_start = {k: m - LATENESS_US for k, m in max_seen.items()}
        late = Counter()
        for row in rows:
            device, t = row[0], row[1]
            if device in wm_start and window_start(t) + SIZE_US <= wm_start[device]:
                late[device] += 1
            else:
                on_time.append(row)
        late_reports += [(d, n, wm_start[d]) for d, n in late.items()]
        per_batch.append(sum(late.values()))
        for device, t, *_ in rows:
            max_seen[device] = max(max_seen.get(device, t), t)
    final_wm = {k: m - LATENESS_US for k, m in max_seen.items()}
    return on_time, late_reports, per_batch, final_wm


def to_spark_rows(rows) -> List[tuple]:
    return [(d, ts(t), temp, label, f"{d}@{window_start(t)}") for d, t, temp, label in rows]


@pytest.mark.parametrize(
    "seed,aggs,path",
    [(7, oracle_aggs, "on-heap"), (2024, oracle_aggs, "on-heap"),
     pytest.param(7, fixed_width_aggs, "hash-aggregate", marks=pytest.mark.all_versions)],
    ids=["7-all", "2024-all", "7-hash-aggregate"],
)
def test_batch_oracle(spark, workdir, seed, aggs, path):
    batches = generate(seed)
    on_time, late_reports, late_per_batch, final_wm = contract(batches)
    n_rows = sum(len(b) for b in batches)
    # The seeds are chosen so that the stream exercises what it should.
    assert 0 < len(late_reports) and sum(n for _, n, _ in late_reports) < n_rows // 4
    assert ("edge", 2, BASE + 110 * SECOND) in late_reports

    replay = Replay(spark, workdir, ORACLE_SCHEMA)
    replay.add_all(to_spark_rows(b) for b in batches)
    assert replay.batches == len(batches)
    events = replay.stream()

    keyed = kw.keyed_watermark(events, key="device", event_time="ts", lateness=LATENESS).window(SIZE)
    ours_df, progress, plan = run(keyed.agg_with_report(*aggs()), workdir, "ours")
    assert partials_path(plan) == path
    ours = ours_df.collect()

    # Report rows: one per key and batch with late rows, watermark at the start of the batch.
    late_rows = ours_df.where("kw_kind = 'late'").select(
        "device", "kw_late_rows", F.unix_micros("kw_watermark").alias("wm")
    )
    assert Counter(tuple(r) for r in late_rows.collect()) == Counter(late_reports)
    # The per-batch total in the observed metrics. (recentProgress has been seen to miss
    # batch 0's report when the query finishes quickly, so only compare the ones it has.)
    observed = {
        p["batchId"]: p["observedMetrics"]["keyed_watermarks_output"]["late_rows"]
        for p in progress
        if "keyed_watermarks_output" in p.get("observedMetrics", {})
    }
    assert len(observed) >= len(batches) - 1
    assert observed == {b: late_per_batch[b] for b in observed}

    windows = {(r["device"], r["ws_us"]): r for r in ours if r["kw_kind"] == "window"}
    assert len(windows) == sum(1 for r in ours if r["kw_kind"] == "window"), "a window was emitted twice"
    # Exactly the windows the keys' final watermarks passed (no idle_timeout, so the others
    # stay open).
    expected_windows = {
        (d, window_start(t))
        for d, t, *_ in on_time
        if window_start(t) + SIZE_US <= final_wm[d]
    }
    assert set(windows) == expected_windows
    # Several emitted windows got on-time rows in more than one batch (merged through the
    # state store).
    on_time_set = set(on_time)
    batches_of = defaultdict(set)
    for b, rows in enumerate(batches):
        for row in rows:
            if row in on_time_set:
                batches_of[(row[0], window_start(row[1]))].add(b)
    assert sum(1 for w in expected_windows if len(batches_of[w]) > 1) >= 3
    assert ("edge", BASE + 110 * SECOND) in windows and windows[("edge", BASE + 110 * SECOND)]["count(1)"] == 2  # 115 s and 110 s

    # Spark's batch aggregation over exactly the on-time rows.
    on_time_df = spark.createDataFrame(to_spark_rows(on_time), ORACLE_SCHEMA)
    reference = on_time_df.groupBy("device", F.window("ts", SIZE)).agg(*aggs())
    expected = {
        (r["device"], r["ws_us"]): r
        for r in reference.withColumn("ws_us", F.unix_micros("window.start")).collect()
    }
    on_time_temps = defaultdict(list)
    for d, t, temp, _ in on_time:
        on_time_temps[(d, window_start(t))].append(temp)

    columns = reference.columns
    assert ours_df.columns[: len(columns)] == columns
    mismatches = []
    for key, row in sorted(windows.items()):
        ref = expected[key]
        for name in columns:
            got, want = row[name], ref[name]
            if name in ORDER_DEPENDENT:
                ok = any(close(got, v) for v in on_time_temps[key])
            elif name in UNORDERED:
                ok = sorted(got) == sorted(want)
            else:
                ok = close(got, want)
            if not ok:
                mismatches.append((key, name, got, want))
    assert not mismatches, mismatches[:10]


@pytest.mark.all_versions
def test_result_schema_equals_spark(spark, tmp_path):
    events = spark.readStream.schema(ORACLE_SCHEMA).parquet(str(tmp_path))
    keyed = kw.keyed_watermark(events, key="device", event_time="ts", lateness=LATENESS).window(SIZE)
    ours = keyed.agg(*oracle_aggs()).schema
    spark_schema = events.groupBy("device", F.window("ts", SIZE)).agg(*oracle_aggs()).schema
    # Names, types and nullability are equal. Field metadata is not: Spark tags its columns
    # (`spark.timeWindow` on window, `__autoGeneratedAlias` on generated names).
    assert [(f.name, f.dataType, f.nullable) for f in ours] == [
        (f.name, f.dataType, f.nullable) for f in spark_schema
    ]
    report = keyed.agg_with_report(*oracle_aggs()).schema
    assert [(f.name, f.dataType) for f in report][: len(ours)] == [(f.name, f.dataType) for f in ours]
    assert [(f.name, f.dataType.simpleString()) for f in report][len(ours):] == [
        ("kw_kind", "string"),
        ("kw_late_rows", "bigint"),
        ("kw_watermark", "timestamp"),
        ("kw_regressions", "bigint"),
    ]
    # Composite keys keep their order, before the window column.
    composite = (
        kw.keyed_watermark(events, key=["wtag", "device"], event_time="ts", lateness=LATENESS)
        .window(SIZE)
        .agg(F.count("*"), F.avg("temp"))
    )
    assert composite.schema.simpleString() == (
        events.groupBy("wtag", "device", F.window("ts", SIZE)).agg(F.count("*"), F.avg("temp")).schema.simpleString()
    )


def test_timestamp_ntz_event_time_is_rejected_with_a_cast_hint(spark, tmp_path):
    # docs/semantics.md: the event time must be TIMESTAMP; TIMESTAMP_NTZ gets a clear error.
    events = spark.readStream.schema("device STRING, ts TIMESTAMP_NTZ, temp DOUBLE").parquet(str(tmp_path))
    with pytest.raises(IllegalArgumentException, match="event_time: column 'ts' must be of type TIMESTAMP.*cast"):
        kw.keyed_watermark(events, "device", "ts", LATENESS)


# =========================================================================================
# b) Streaming oracle: Spark's own withWatermark + window aggregation
# =========================================================================================

STREAM_SCHEMA = "site STRING, device STRING, ts TIMESTAMP, temp DOUBLE"


def stream_aggs() -> list:
    return [
        F.count("*").alias("n"),
        F.sum("temp").alias("sum_temp"),
        F.avg("temp").alias("avg_temp"),
        F.min("temp").alias("min_temp"),
        F.max("temp").alias("max_temp"),
        F.max("ts").alias("last_ts"),
        F.approx_count_distinct("temp").alias("distinct_temps"),
        F.collect_list("temp").alias("temps"),  # compared sorted: row order is not defined
    ]


def no_late_stream(seed: int, keys: Sequence[Tuple[str, str]], batches: int, jitter_us: int):
    """Micro-batches where every key advances with the same cursor, rows up to `jitter_us`
    behind it, and no row is late by either rule: each row's window end is after
    (max event time over ALL keys of the earlier batches) - lateness, which is at least
    Spark's global watermark (Spark's is older still) and at least each key's own. The last
    batch gives every key a row at the same final time, so each key's final watermark equals
    Spark's global one."""
    rng = random.Random(seed)
    cursor = BASE + 2 * SECOND
    global_max = None
    out = []
    for b in range(batches):
        cursor += rng.randint(4 * SECOND, 9 * SECOND)
        rows = []
        for site, device in keys:
            for _ in range(rng.randint(1, 4)):
                t = cursor - rng.randint(0, jitter_us)
                if global_max is not None:
                    # Keep it on time: its window must end after global_max - lateness.
                    t = max(t, window_start(global_max - LATENESS_US))
                rows.append((site, device, t, round(rng.uniform(0, 30), 1)))
            if b == batches - 1:
                rows.append((site, device, cursor, 1.0))
        if global_max is not None:
            assert all(window_start(t) + SIZE_US > global_max - LATENESS_US for _, _, t, _ in rows)
        rng.shuffle(rows)
        out.append(rows)
        global_max = max([global_max or 0] + [t for _, _, t, _ in rows])
    return out


def numeric_stream_aggs() -> list:
    """stream_aggs without collect_list: every buffer fixed-width (Spark's HashAggregateExec partials)."""
    return [a for a in stream_aggs() if "temps" not in str(a)]


def compare_with_spark(spark, workdir, batches, keys: List[str], slide: Optional[str] = None, aggs=stream_aggs):
    replay = Replay(spark, workdir, STREAM_SCHEMA)
    replay.add_all([(s, d, ts(t), temp) for s, d, t, temp in b] for b in batches)
    events = replay.stream()

    ours_df, ours_progress, plan = run(
        kw.keyed_watermark(events, key=keys if len(keys) > 1 else keys[0], event_time="ts", lateness=LATENESS)
        .window(SIZE, slide=slide)
        .agg(*aggs()),
        workdir,
        "ours",
    )
    assert partials_path(plan) == ("hash-aggregate" if aggs is numeric_stream_aggs else "on-heap")
    spark_df, spark_progress, _ = run(
        events.withWatermark("ts", LATENESS)
        .groupBy(*keys, F.window("ts", SIZE) if slide is None else F.window("ts", SIZE, slide))
        .agg(*aggs()),
        workdir,
        "spark",
    )
    assert ours_df.columns == spark_df.columns

    def by_window(df):
        rows = df.collect()
        out = {tuple(r[k] for k in keys) + (r["ws_us"],): r for r in rows}
        assert len(out) == len(rows), "a window was emitted twice"
        return out

    ours, theirs = by_window(ours_df), by_window(spark_df)

    # What Spark 4.3 does with AvailableNow (measured): it processes the data batches (one per
    # file here), then, because the last data batch moved the watermark, runs ONE MORE no-data
    # batch with that watermark, so it evicts every window the final watermark closes. (When
    # the last batch does not move the watermark, as in the divergence test below, there is
    # no such batch and nothing is left to evict.) Its output after the stream ends is
    # therefore complete, even though each window is emitted one batch later than ours. Ours
    # follows Spark's global watermark too by default (the max_skew bound, docs/semantics.md
    # "Bounded skew"), so Spark runs the same trailing no-data batch for it; it emits nothing
    # there (its windows were emitted in the data batches).
    assert spark_progress[-1]["numInputRows"] == 0
    assert spark_progress[-1]["batchId"] == len(batches)
    assert ours_progress[-1]["numInputRows"] == 0 and ours_progress[-1]["batchId"] == len(batches)
    assert ours_progress[-1]["observedMetrics"]["keyed_watermarks_output"]["windows_emitted"] == 0

    # Expected windows: those the final watermark closes (the same for every key and Spark).
    final_wm = max(t for b in batches for _, _, t, _ in b) - LATENESS_US
    expected = {
        tuple({"site": s, "device": d}[k] for k in keys) + (window_start(t),)
        for b in batches
        for s, d, t, _ in b
        if window_start(t) + SIZE_US <= final_wm
    }
    if slide is None:
        assert set(theirs) == expected
    assert set(ours) == set(theirs)
    for key in sorted(ours):
        a, b = ours[key], theirs[key]
        for name in ours_df.columns:
            if name == "temps":
                assert sorted(a[name]) == sorted(b[name]), (key, name)
            else:
                assert close(a[name], b[name]), (key, name, a[name], b[name])
    return ours


@pytest.mark.parametrize(
    "seed,jitter_us",
    [(11, 0), (12, 4 * SECOND)],
    ids=["in-order", "out-of-order-within-lateness"],
)
def test_single_key_matches_spark_streaming(spark, workdir, seed, jitter_us):
    batches = no_late_stream(seed, [("s1", "a")], batches=6, jitter_us=jitter_us)
    out = compare_with_spark(spark, workdir, batches, ["device"])
    assert len(out) >= 3


@pytest.mark.all_versions
def test_sliding_windows_match_spark_streaming(spark, workdir):
    # In order (jitter 0), so none of a row's sliding windows is late by either rule.
    keys = [("s1", "a"), ("s2", "b")]
    batches = no_late_stream(31, keys, batches=6, jitter_us=0)
    out = compare_with_spark(spark, workdir, batches, ["device"], slide="5 seconds")
    assert len(out) >= 8


def test_many_sliding_windows_per_row_match_spark_streaming(spark, workdir):
    # Slide 1 s: every row is in 10 windows, so a key has more than a few partials per batch.
    batches = no_late_stream(32, [("s1", "a"), ("s2", "b")], batches=4, jitter_us=0)
    out = compare_with_spark(spark, workdir, batches, ["device"], slide="1 second")
    assert len(out) >= 40


@pytest.mark.parametrize("slide", [None, "5 seconds", "1 second"])
def test_fixed_width_partials_match_spark_streaming(spark, workdir, slide):
    # Numeric aggregates only: the partials are Spark's HashAggregateExec's,
    # with a composite key and out-of-order rows (jitter) for tumbling windows.
    keys = [("s1", "a"), ("s1", "b"), ("s2", "a")]
    batches = no_late_stream(41, keys, batches=5, jitter_us=3 * SECOND if slide is None else 0)
    out = compare_with_spark(spark, workdir, batches, ["site", "device"], slide=slide, aggs=numeric_stream_aggs)
    assert {k[:2] for k in out} == set(keys)


@pytest.mark.parametrize("size,path", [("60 seconds", "hash-aggregate"), ("70 seconds", "on-heap")])
def test_many_windows_per_row_match_spark_batch(spark, workdir, size, path):
    # Slides of 1 second: 60 windows per row are planned as Spark's ExpandExec copies; 70 are
    # more than HashAggregatePartials.MaxWindowsPerRow and take the on-heap loop. Batch 0 has
    # every row (nothing is late before a key's first batch); batch 1 moves each key a day
    # ahead, which closes every window of batch 0 and shares none with it.
    rng = random.Random(11)
    devices = ["a", "b", "c"]
    rows = [("s", d, BASE + rng.randrange(0, 200 * SECOND), round(rng.uniform(0, 30), 1))
            for d in devices for _ in range(40)]
    closing = [("s", d, BASE + 86_400 * SECOND, 0.0) for d in devices]
    replay = Replay(spark, workdir, STREAM_SCHEMA)
    replay.add_all([(si, d, ts(t), temp) for si, d, t, temp in b] for b in (rows, closing))
    aggs = [F.count("*").alias("n"), F.sum("temp").alias("s"), F.max("temp").alias("hi")]
    ours_df, _, plan = run(
        kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness=LATENESS)
        .window(size, slide="1 second").agg(*aggs),
        workdir, "ours")
    assert partials_path(plan) == path
    first = spark.createDataFrame([(si, d, ts(t), temp) for si, d, t, temp in rows], STREAM_SCHEMA)
    theirs = first.groupBy("device", F.window("ts", size, "1 second")).agg(*aggs)
    key = lambda r: (r["device"], r["window"]["start"])  # noqa: E731
    got = sorted((key(r), r["n"], round(r["s"], 6), r["hi"]) for r in ours_df.collect())
    want = sorted((key(r), r["n"], round(r["s"], 6), r["hi"]) for r in theirs.collect())
    assert len(want) > 3 * 200 and got == want


def test_composite_key_matches_spark_streaming(spark, workdir):
    keys = [("s1", "a"), ("s1", "b"), ("s2", "a")]
    batches = no_late_stream(21, keys, batches=5, jitter_us=3 * SECOND)
    out = compare_with_spark(spark, workdir, batches, ["site", "device"])
    assert {k[:2] for k in out} == set(keys)


# =========================================================================================
# c) Multi-key divergence (documentation test)
# =========================================================================================


@pytest.mark.all_versions
def test_slow_uploader_kept_by_keyed_watermark_dropped_by_spark(spark, workdir):
    """`fast` streams in real time; `slow` is a batch uploader that sends its backlog
    (12 s .. 47 s) after `fast` has reached 111 s. With Spark's global watermark (max over all keys - 5 s) the backlog is far behind
    and dropped; with keyed watermarks `slow` is only judged against its own rows."""
    batches = [  # (site, device, seconds after BASE)
        [("x", "fast", 1), ("x", "fast", 5), ("x", "slow", 2), ("x", "slow", 4)],
        [("x", "fast", 100), ("x", "fast", 101)],
        [("x", "fast", 110), ("x", "fast", 111)],
        # The backlog, in batch 3. Spark checks late rows in batch N against the watermark of
        # batches < N-1 (docs/semantics.md), here 101 - 5 = 96 s: every backlog window ends
        # before that. In batch 2 (watermark of batch 0: 0 s) Spark would still have taken it.
        [("x", "slow", t) for t in (12, 15, 22, 28, 33, 41, 47)],
    ]
    backlog = len(batches[-1])
    replay = Replay(spark, workdir, STREAM_SCHEMA)
    replay.add_all([(s, d, ts(BASE + t * SECOND), 20.0) for s, d, t in b] for b in batches)
    events = replay.stream()

    ours_df, ours_progress, _ = run(
        kw.keyed_watermark(events, key="device", event_time="ts", lateness=LATENESS)
        .window(SIZE)
        .agg_with_report(F.count("*").alias("n")),
        workdir,
        "ours",
    )
    spark_df, spark_progress, _ = run(
        events.withWatermark("ts", LATENESS).groupBy("device", F.window("ts", SIZE)).agg(F.count("*").alias("n")),
        workdir,
        "spark",
    )

    ours = {(r["device"], (r["ws_us"] - BASE) // SECOND): r["n"] for r in ours_df.where("kw_kind = 'window'").collect()}
    theirs = {(r["device"], (r["ws_us"] - BASE) // SECOND): r["n"] for r in spark_df.collect()}

    # Ours: nothing late; slow's watermark is 47 - 5 = 42 s, so [0,10) .. [30,40) are emitted
    # with all their rows and [40,50) (41 s, 47 s) stays open. fast's watermark is
    # 111 - 5 = 106 s: [0,10) emitted, [100,110) and [110,120) still open.
    assert ours_df.where("kw_kind = 'late'").count() == 0
    assert {k: v for k, v in ours.items() if k[0] == "slow"} == {
        ("slow", 0): 2, ("slow", 10): 2, ("slow", 20): 2, ("slow", 30): 1,
    }
    assert {k: v for k, v in ours.items() if k[0] == "fast"} == {("fast", 0): 2}
    outputs = [
        p["observedMetrics"]["keyed_watermarks_output"]
        for p in ours_progress
        if "keyed_watermarks_output" in p.get("observedMetrics", {})
    ]
    assert len(outputs) == len(batches) and all(o["late_rows"] == 0 for o in outputs)

    # Spark: the whole backlog is behind the global watermark (106 s in the last batch) and
    # dropped; only slow's first window, emitted before fast moved the watermark, survives.
    assert {k: v for k, v in theirs.items() if k[0] == "slow"} == {("slow", 0): 2}
    assert {k: v for k, v in theirs.items() if k[0] == "fast"} == {("fast", 0): 2}
    # Spark counts the dropped rows at its state operator's input, i.e. after the partial
    # aggregation of the (single-file) batch: one row per backlog window, 4 for 7 rows.
    dropped = sum(
        op.get("numRowsDroppedByWatermark", 0) for p in spark_progress for op in p["stateOperators"]
    )
    backlog_windows = {t // 10 for _, _, t in batches[-1]}
    assert dropped == len(backlog_windows) == 4

    slow_total_ours = sum(v for k, v in ours.items() if k[0] == "slow")
    slow_total_spark = sum(v for k, v in theirs.items() if k[0] == "slow")
    assert (slow_total_ours, slow_total_spark) == (2 + backlog - 2, 2)  # 2 backlog rows still open


def test_decimal_buffers_in_fixed_width_partials_match_spark(spark, workdir):
    """sum/avg/max of decimals: a DECIMAL(38, 2) buffer is mutable in place in an UnsafeRow but
    lives in its variable-length region, so the payload bytes must carry it intact."""
    rows = [(f"d{i % 7}", ts(BASE + (i % 10) * SECOND), i * 1.25 if i % 5 else None) for i in range(200)]
    closing = [(f"d{i}", ts(BASE + 40 * SECOND), 1.0) for i in range(7)]
    replay = Replay(spark, workdir, "device STRING, ts TIMESTAMP, temp DOUBLE")
    replay.add_all([rows, closing])

    def with_decimals(df):
        return df.withColumn("big", F.col("temp").cast("decimal(30,2)")).withColumn("small", F.col("temp").cast("decimal(10,2)"))

    def aggs():
        return [F.sum("big"), F.avg("small"), F.sum("small"), F.max("big"), F.count("*")]

    ours_df, _, plan = run(
        kw.keyed_watermark(with_decimals(replay.stream()), key="device", event_time="ts", lateness=LATENESS)
        .window(SIZE).agg(*aggs()),
        workdir,
        "ours",
    )
    assert partials_path(plan) == "hash-aggregate"
    batch = with_decimals(spark.createDataFrame(rows, "device STRING, ts TIMESTAMP, temp DOUBLE"))
    want = batch.groupBy("device", F.window("ts", SIZE)).agg(*aggs()).drop("window").collect()
    got = ours_df.drop("window", "ws_us").collect()
    assert len(want) == 7 and sorted(map(tuple, got)) == sorted(map(tuple, want))


def test_back_quoted_key_name_as_in_group_by(spark, workdir):
    """A key column whose name has a dot is named back-quoted, as in Spark's groupBy; the result
    names and values are those of groupBy("`dev.id`", window(...))."""
    schema = "`dev.id` STRING, ts TIMESTAMP, temp DOUBLE"
    rows = [(f"d{i % 3}", ts(BASE + (i % 20) * SECOND), float(i)) for i in range(60)]
    closing = [(f"d{i}", ts(BASE + 60 * SECOND), 0.0) for i in range(3)]
    replay = Replay(spark, workdir, schema)
    replay.add_all([rows, closing])
    ours = (
        kw.keyed_watermark(replay.stream(), key="`dev.id`", event_time="ts", lateness="1 second")
        .window(SIZE).agg(F.count("*").alias("n"), F.sum("temp").alias("s"))
    )
    out, _, _ = run(ours, workdir, "ours")
    batch = spark.createDataFrame(rows, schema)
    want = batch.groupBy("`dev.id`", F.window("ts", SIZE)).agg(F.count("*").alias("n"), F.sum("temp").alias("s"))
    assert ours.schema.simpleString() == want.schema.simpleString() and ours.columns[0] == "dev.id"
    assert sorted(map(tuple, out.drop("ws_us").collect())) == sorted(map(tuple, want.collect()))
    assert len(want.collect()) == 6
