"""Per-key deduplication inside the keyed stage (option ``dedup``; docs/semantics.md,
"Deduplication").

- the operator, in memory, against the reference model (tests/reference_model.py with
  ``dedup=True``), hypothesis-driven: streams with copies of rows in the same micro-batch
  (exact copies: which copy of a batch is kept is unspecified) and in later ones (other times
  and values: the first copy wins), and the same values under another key (not a copy);
- one streaming query against Spark's batch ``dropDuplicates(...).groupBy(...)``, with
  ``kw.metrics`` counting the copies;
- bad ``dedup`` options refused before the query starts;
- bounded state under churn with dedup on: the dedup entries leave with their horizon.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import List

import pytest
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

import keyed_watermarks as kw
from reference_model import run_model
from support import (
    IN_MEMORY_CASES, LATENESS_CHOICES_S, SECOND, WINDOW_CHOICES_S, Replay, aggs, check_windows, in_memory, options,
    output_rows, packed_streams, run_batches, ts, window_spec,
)

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, packet LONG"


@st.composite
def streams_with_copies(draw):
    """packed_streams with a packet id per row and copies: exact ones in the row's batch, and
    ones in a later batch at another time and value; some copies go to another key (there
    they are not copies)."""
    batches = [[(k, t, v, i * 1000 + j) for j, (k, t, v) in enumerate(b)] for i, b in enumerate(draw(packed_streams()))]
    keys = sorted({r[0] for b in batches for r in b if r[0] is not None})
    valid = [(i, r) for i, b in enumerate(batches) for r in b if r[0] is not None and r[1] is not None]
    for i, row in draw(st.lists(st.sampled_from(valid), max_size=8)) if valid else []:
        kind = draw(st.sampled_from(["same_batch", "later", "other_key"]))
        if kind == "same_batch":
            batches[i].insert(draw(st.integers(0, len(batches[i]))), row)
        elif kind == "later":
            later = draw(st.integers(i, len(batches) - 1))
            t = row[1] + draw(st.integers(-15, 15)) * SECOND
            batches[later].append((row[0], t, draw(st.sampled_from([None, 99.0])), row[3]))
        else:
            batches[i].append((draw(st.sampled_from(keys)), row[1], row[2], row[3]))
    # Copies of one batch must be exact: two non-exact copies of one row in one batch are not
    # generated (a later batch's copy whose first copy is in that batch only).
    for b in batches:
        firsts = {}
        for n, r in enumerate(b):
            if r[0] is not None and r[1] is not None:
                first = firsts.setdefault((r[0], r[3]), r)
                if first != r:
                    b[n] = first
    return batches


def duplicates_per_batch(per_batch) -> Counter:
    """The rows dropped as copies per batch, from the batch's per-key metrics (its "key" row)."""
    return Counter({n: r["kw_key_metrics"]["duplicate_rows"] for n, rows in enumerate(per_batch)
                    for r in rows if r["kw_kind"] == "key" and r["kw_key_metrics"]["duplicate_rows"]})


# Fewer cases than the other in-memory rules (CI time), no shrinking (each step plans Spark jobs;
# the notes show the model's view of a failing case).
@settings(in_memory, max_examples=min(IN_MEMORY_CASES, 10), phases=[Phase.explicit, Phase.generate])
@given(batches=streams_with_copies(), lateness_s=st.sampled_from(LATENESS_CHOICES_S),
       window=st.sampled_from([(w, None) for w in WINDOW_CHOICES_S] + [(10, 5)]), allowed_s=st.sampled_from([0, 0, 7]))
def test_dedup_in_memory_against_the_model(harness, batches, lateness_s, window, allowed_s):
    size_s, slide_s = window
    model = run_model(batches, lateness_s * SECOND, size_s * SECOND, slide=slide_s and slide_s * SECOND,
                      allowed=allowed_s * SECOND, max_skew=None, dedup=True)
    note(f"lateness={lateness_s}s window={window} allowed={allowed_s}s model={model}")
    h = harness(options(lateness_s, dedup=["packet"], window=window_spec(size_s, slide_s, allowed_s)), aggs(),
                schema=SCHEMA)
    per_batch = run_batches(h, batches)
    check_windows(output_rows(per_batch, "window"), model)
    want = Counter()
    for (n, _key), copies in model.duplicates.items():
        want[n] += copies
    assert duplicates_per_batch(per_batch) == want


# Two devices, packet ids per device; copies in the same batch and the next ones, one copy of
# a d0 packet id under d1 (not a copy there); everything on time.
BASE = 1_700_000_000


def at(s: int):
    return ts((BASE + s) * SECOND)


E2E_BATCHES = [
    [("d0", at(1), 1.0, 1), ("d0", at(1), 1.0, 1), ("d0", at(3), 2.0, 2), ("d1", at(2), 4.0, 1)],
    [("d0", at(3), 2.0, 2), ("d1", at(12), 8.0, 2), ("d1", at(2), 4.0, 1), ("d1", at(4), 16.0, 7)],
    [("d0", at(14), 32.0, 3), ("d0", at(1), 1.0, 1), ("d1", at(12), 8.0, 2), ("d1", at(15), 64.0, 1)],
    [("d0", at(40), 1.0, 4), ("d1", at(41), 1.0, 3)],
]
COPIES = 6  # rows above whose (device, packet) came before


@pytest.mark.all_versions
def test_dedup_query_against_spark_drop_duplicates(spark, workdir: Path):
    replay = Replay(spark, workdir, SCHEMA)
    replay.add_all(E2E_BATCHES)
    out = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="5 seconds",
                              dedup=["packet"])
           .window("10 seconds").agg(F.count("*").alias("n"), F.sum("temp").alias("s")))
    got: List = []
    query = (out.writeStream.foreachBatch(lambda b, _: got.extend(b.collect()))
             .option("checkpointLocation", str(workdir / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    # The first copy of each (device, packet) in arrival order: Spark's batch dropDuplicates
    # keeps an arbitrary one, a stream keeps the first.
    firsts = {}
    for r in (r for b in E2E_BATCHES for r in b):
        firsts.setdefault((r[0], r[3]), r)
    rows = spark.createDataFrame(list(firsts.values()), SCHEMA)
    want = (rows.groupBy("device", F.window("ts", "10 seconds"))
            .agg(F.count("*").alias("n"), F.sum("temp").alias("s")))
    # Every window but the last ones (their keys' watermarks have not passed them).
    closed = want.where(F.col("window.end") <= at(35))
    assert sorted(map(tuple, got)) == sorted(map(tuple, closed.collect()))
    assert len(got) == 4
    metrics = [kw.metrics(p) for p in query.recentProgress]
    assert sum(m.get("duplicate_rows", 0) for m in metrics) == COPIES
    assert sum(m.get("late_rows", 0) for m in metrics) == 0


@pytest.fixture(scope="module")
def events(spark):
    return spark.readStream.format("rate").load().select(
        F.col("timestamp").alias("ts"), (F.col("value") % 3).cast("string").alias("device"),
        F.col("value").alias("packet"), F.create_map(F.lit("a"), F.col("value")).alias("attrs"))


@pytest.mark.parametrize("dedup, message", [
    (["nope"], "nope"),
    (["device"], "dedup: column 'device' is a key column"),
    ([], "dedup: expected a column name or a non-empty list"),
    (["packet", "packet"], "dedup: duplicate columns"),
    (["attrs"], "dedup: column 'attrs' of type MAP"),
])
def test_bad_dedup_options_are_refused_before_the_query(events, dedup, message):
    with pytest.raises(Exception, match=message):
        kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds", dedup=dedup)


# Churn with copies: NEW_KEYS new devices per batch, each active in one or two batches, every
# row sent twice (in its batch); the dedup entries leave state with the keys' horizons.
SPAN = 15 * 60 * SECOND
CHURN_BASE = 1_700_001_000 * SECOND - (1_700_001_000 * SECOND) % SPAN
NEW_KEYS, BATCHES = 20, 7


def test_dedup_state_stays_bounded_under_churn(spark, workdir: Path):
    rng = random.Random(5)
    batches: List[List[tuple]] = [[] for _ in range(BATCHES)]
    packet = 0
    for b in range(BATCHES):
        for j in range(NEW_KEYS):
            for w in range(1 if rng.random() < 0.5 else 2):
                if b + w < BATCHES:
                    for _ in range(2):
                        packet += 1
                        row = (f"d{b:02d}-{j:03d}", CHURN_BASE + (b + w) * SPAN + rng.randrange(SPAN), 1.0, packet)
                        batches[b + w] += [row, row]
    replay = Replay(spark, workdir, SCHEMA)
    replay.add_all([[(k, ts(t), v, p) for k, t, v, p in b] for b in batches])
    report = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="30 seconds",
                                 max_skew="20 minutes", dedup=["packet"])
              .window("15 minutes").agg(F.count("*").alias("n"), F.sum("temp").alias("s")))
    got: List = []
    checkpoint = workdir / "checkpoint"
    query = (report.writeStream
             .foreachBatch(lambda b, _: got.extend(b.select("device", F.unix_micros("window.start").alias("start"),
                                                            "n", "s").collect()))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    metrics = [kw.metrics(p) for p in query.recentProgress]
    sent = sum(len(b) for b in batches)
    assert sum(m["duplicate_rows"] for m in metrics) == sent // 2
    # Every window emitted counts each row once (copies dropped), the silent keys' last ones too.
    distinct = Counter((r[0], r[1] - (r[1] - CHURN_BASE) % SPAN) for b in batches for r in set(b))
    assert all(r.n == r.s == distinct[(r.device, r.start)] for r in got)
    assert len(got) >= NEW_KEYS * (BATCHES - 3)
    # In state: the keys of the last hour or so, and of their rows' values only those whose
    # windows are still open (a row's entry leaves when its key's watermark passes its window).
    keys = spark.read.format("statestore").option("path", str(checkpoint)).option("stateVarName", "key_state").load()
    seen = spark.read.format("statestore").option("path", str(checkpoint)).option("stateVarName", "dedup_seen").load()
    active = len({r[0] for r in batches[-1]})
    n_keys, n_seen = keys.count(), seen.count()
    assert 0 < n_keys <= 3 * active < NEW_KEYS * BATCHES
    assert n_seen <= 2 * 2 * n_keys  # at most a key's rows of its open windows (2 per window, 2 windows)
    assert {r[0] for r in seen.select("key").collect()} <= {r[0] for r in keys.select("key").collect()}
