"""Bounded state under device churn (docs/semantics.md, "Bounded state: keys leave state").

The churn stream: every micro-batch covers the next 15 minutes of event time and brings
``NEW_KEYS`` devices never seen before; each is active in one or two consecutive micro-batches
(windows of 15 minutes) and then silent forever. Without a bound every key ever seen stays in
state; with the default skew bound (an hour) a silent key's last window is emitted once the
fleet's event time is an hour past it, and the key leaves state.

For each event-time configuration (defaults, per-key lateness, adaptive lateness, min of
inputs, an explicit max_skew, closing='global') the query is checked against the policy model
(tests/policy_model.py): the windows emitted in each micro-batch, and the rows in state after
each micro-batch (Spark's own ``numRowsTotal``); and the state, read with Spark's state data
source (``format("statestore")``, ``key_state``), holds exactly the model's keys, within a fixed
multiple of the keys active in the last window span, in rows and in bytes.
(Processing-time policies are covered by the Scala suites and benchmarks/churn.py.)
"""

from __future__ import annotations

import math
import random
from typing import List

from pyspark.sql import functions as F

import keyed_watermarks as kw
from policy_model import Policy, run_policy_model
from support import SECOND, Replay, ts

SPAN = 15 * 60 * SECOND  # event time per micro-batch = the window size
BASE = 1_700_001_000 * SECOND - (1_700_001_000 * SECOND) % SPAN  # aligned to the windows
NEW_KEYS = 60
BATCHES = 10
LATENESS = 30 * SECOND
SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, lat STRING, src STRING"


def churn(seed: int = 11) -> List[List[tuple]]:
    """Micro-batches of (key, micros, temp, lateness micros, source) rows."""
    rng = random.Random(seed)
    batches: List[List[tuple]] = [[] for _ in range(BATCHES)]
    for b in range(BATCHES):
        for j in range(NEW_KEYS):
            key = f"d{b:02d}-{j:03d}"
            lateness = rng.choice([None, 60 * SECOND])
            for w in range(1 if rng.random() < 0.5 else 2):
                if b + w < BATCHES:
                    for _ in range(2):
                        t = BASE + (b + w) * SPAN + rng.randrange(SPAN)
                        batches[b + w].append((key, t, float(rng.randint(0, 9)), lateness, rng.choice("ab")))
    return batches


CONFIGS = {
    "defaults": ({}, Policy(LATENESS)),
    "adaptive": ({"adaptive_lateness": kw.AdaptiveLateness(0.9, min="0 seconds", max="2 minutes")},
                 Policy(LATENESS, adaptive=(0.9, 0, 120 * SECOND))),
    "sources": ({"source": "src"}, Policy(LATENESS, sources=[])),
    "max_skew+key_lateness": ({"max_skew": "20 minutes", "key_lateness": lambda: F.col("lat")},
                              Policy(LATENESS, max_skew=20 * 60 * SECOND, column_lateness=True)),
    "closing_global": ({"closing": "global"}, Policy(LATENESS, global_closing=True)),
}


def test_state_stays_bounded_under_churn(spark, workdir):
    # The configurations run as concurrent queries (their micro-batches mostly wait on state
    # store commits), then each is checked.
    batches = churn()
    replay = Replay(spark, workdir, schema=SCHEMA)
    replay.add_all([[(k, ts(t), v, None if lat is None else f"{lat // SECOND} seconds", s)
                     for k, t, v, lat, s in b] for b in batches])
    queries = {}
    for i, (name, (options, _)) in enumerate(CONFIGS.items()):
        options = {k: v() if callable(v) else v for k, v in options.items()}
        report = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="30 seconds",
                                     **options)
                  .window("15 minutes")
                  .agg_with_report(F.count("*").alias("n")))
        queries[name] = (report.writeStream.format("noop").outputMode("append")
                         .option("checkpointLocation", str(workdir / f"checkpoint-{i}"))
                         .trigger(availableNow=True).start(), workdir / f"checkpoint-{i}")
    for query, _ in queries.values():
        query.awaitTermination()
        assert query.exception() is None, query.exception()
    for name, (query, checkpoint) in queries.items():
        check(spark, name, batches, list(query.recentProgress), checkpoint)


def check(spark, name, batches, progress, checkpoint) -> None:
    policy = CONFIGS[name][1]
    model = run_policy_model(batches, SPAN, policy)
    assert len(progress) == model.batches, name

    # Every window the model emits, in the same micro-batch: a silent key's last window too.
    emitted = [p.observedMetrics["keyed_watermarks_output"]["windows_emitted"] for p in progress]
    assert emitted == [sum(1 for w in model.emitted if w[3] == b) for b in range(model.batches)], name
    assert sum(emitted) > NEW_KEYS * (BATCHES - 6), f"{name}: silent keys' last windows were not emitted"

    # Rows in state after each micro-batch: one per key (plus its sketch with adaptive lateness,
    # plus one per (key, source) with min of inputs), exactly the model's keys.
    per_key = 2 if policy.adaptive else 1
    rows = [p.stateOperators[0].numRowsTotal for p in progress]
    assert rows == [k * per_key + s for k, s in zip(model.state_keys, model.state_sources)], name

    # Bounded: within a fixed multiple of the keys active in the last window span (the keys
    # with rows in the last micro-batch), whatever the number of keys seen (NEW_KEYS * BATCHES),
    # and no longer growing over the last micro-batches.
    active = len({r[0] for r in batches[-1]})
    skew = 0 if policy.global_closing else policy.max_skew
    multiple = math.ceil((skew + LATENESS + 60 * SECOND) / SPAN) + 1
    assert max(model.state_keys) <= multiple * active < NEW_KEYS * BATCHES, name
    assert model.state_keys[BATCHES - 1] <= model.state_keys[BATCHES - 4] + NEW_KEYS // 4, f"{name}: still grows"

    # The state as Spark's state data source reads it: the model's keys, and bytes bounded too.
    state = (spark.read.format("statestore").option("path", str(checkpoint))
             .option("stateVarName", "key_state").load())
    sizes = state.select((F.octet_length("value.open_windows") + 8 * len(state.schema["value"].dataType.fields))
                         .alias("bytes")).collect()
    assert len(sizes) == model.state_keys[-1], name
    assert max(r.bytes for r in sizes) <= 400, name  # the record and at most a few small windows
    assert sum(r.bytes for r in sizes) <= 400 * multiple * active, name
