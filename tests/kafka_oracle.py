"""What the Kafka -> Delta pipeline must have written, computed without it.

- The messages: read back from the topic with Spark's batch Kafka reader (partition, offset,
  key, value) and parsed here in plain Python (``json`` and ``datetime``, not ``from_json``).
- The micro-batches: the Kafka offset ranges the query's checkpoint logged for each committed
  batch (``offsets/<n>``; batch n reads [end of n-1, end of n) of every partition).
- Which rows are on time, late or invalid, and which windows each batch emits: the reference
  model of docs/semantics.md (tests/reference_model.py) over those batches.
- The window values: Spark's batch ``groupBy(device, window(ts)).agg(...)`` over the on-time
  messages.
- With early panes (``--emit every_batch --sink merge``): the model's panes, and per window the
  latest one a MERGE sink keeps after each batch (``latest_panes``); its values are Spark's
  groupBy over the pane's messages.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from reference_model import ModelResult, Window, run_model
from support import SECOND
Coord = Tuple[int, int]  # (partition, offset)


@dataclass(frozen=True)
class Message:
    partition: int
    offset: int
    key: Optional[str]
    value: str
    ts: Optional[int]  # event time, micros; None when the value has no valid one


def parse_ts(value: str) -> Optional[int]:
    try:
        ts = json.loads(value).get("ts")
        t = dt.datetime.fromisoformat(ts)
    except (ValueError, TypeError, AttributeError):
        return None
    if t.tzinfo is None:
        return None
    return int(t.timestamp()) * SECOND + t.microsecond


def read_topic(spark: SparkSession, bootstrap: str, topic: str) -> List[Message]:
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").load()
            .select(F.col("key").cast("string").alias("key"),
                    F.col("value").cast("string").alias("value"), "partition", "offset")
            .collect())
    return [Message(r.partition, r.offset, r.key, r.value, parse_ts(r.value)) for r in rows]


def logged_batches(checkpoint: Path, topic: str) -> List[Dict[int, Tuple[int, int]]]:
    """Per committed batch, partition -> [start, end) offsets, from the checkpoint's logs."""
    committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert committed == list(range(len(committed))), f"gap in the commit log: {committed}"
    batches, previous = [], {}
    for n in committed:
        lines = (checkpoint / "offsets" / str(n)).read_text().splitlines()
        ends = {int(p): e for p, e in json.loads(lines[2])[topic].items()}
        batches.append({p: (previous.get(p, 0), e) for p, e in ends.items()})
        previous = ends
    return batches


@dataclass
class Expected:
    messages: List[Message]
    batch_of: Dict[Coord, int]
    model: ModelResult
    # (device, window start micros) -> batch that emits it, and its on-time messages
    windows: Dict[Tuple[str, int], int] = field(default_factory=dict)
    on_time: Dict[Tuple[str, int], List[Coord]] = field(default_factory=dict)
    # dead letter: (partition, offset) -> (reason kind, watermark micros or None, batch)
    dead_letter: Dict[Coord, Tuple[str, Optional[int], int]] = field(default_factory=dict)


def expected(messages: List[Message], batches: List[Dict[int, Tuple[int, int]]],
             lateness_s: int, window_s: int, emit: str = "final",
             accumulation: str = "accumulating") -> Expected:
    by_coord = {(m.partition, m.offset): m for m in messages}
    batch_of: Dict[Coord, int] = {}
    model_batches = []
    for n, ranges in enumerate(batches):
        rows = []
        for p, (start, end) in sorted(ranges.items()):
            for off in range(start, end):
                m = by_coord[(p, off)]
                batch_of[(p, off)] = n
                rows.append((m.key, m.ts, (p, off)))
        model_batches.append(rows)
    assert len(batch_of) == len(messages), "the logged batches do not cover the topic"
    model = run_model(model_batches, lateness_s * SECOND, window_s * SECOND, emit=emit,
                      accumulation=accumulation)
    out = Expected(messages, batch_of, model)
    for w in model.emitted:
        out.windows[(w.key, w.start)] = w.batch
        out.on_time[(w.key, w.start)] = list(w.values)
    for b, key, _t, coord in model.late_rows:
        out.dead_letter[coord] = ("late", model.late_watermark[(b, key)], b)
    for m in messages:
        if m.key is None or m.ts is None:
            reason = "null key" if m.key is None else "null event time"
            out.dead_letter[(m.partition, m.offset)] = (reason, None, batch_of[(m.partition, m.offset)])
    assert len(out.dead_letter) == len(model.late_rows) + model.invalid
    return out


def spark_window_values(spark: SparkSession, bootstrap: str, topic: str, exp: Expected,
                        window: str) -> Dict[Tuple[str, int], tuple]:
    """Spark's batch groupBy(device, window).agg(...) over the on-time messages of the
    emitted windows: (device, start micros) -> (n, avg, min, max)."""
    return spark_values_over(spark, bootstrap, topic, exp.on_time, window)


def latest_panes(model: ModelResult, upto: Optional[int] = None) -> Dict[Tuple[str, int], Window]:
    """Per window, its latest pane (retractions left out) fired in a batch <= ``upto`` (None:
    any): the row a sink keeping each window's highest ``kw_pane_index`` holds then."""
    out: Dict[Tuple[str, int], Window] = {}
    for w in model.emitted:  # in firing order
        if not w.retraction and (upto is None or w.batch <= upto):
            out[(w.key, w.start)] = w
    return out


def spark_values_over(spark: SparkSession, bootstrap: str, topic: str,
                      coords: Dict[Tuple[str, int], List[Coord]],
                      window: str) -> Dict[Tuple[str, int], tuple]:
    """Spark's batch groupBy(device, window).agg(...) over the messages at ``coords`` (each
    window's (partition, offset) list): (device, start micros) -> (n, avg, min, max)."""
    on_time = [(p, o) for cs in coords.values() for p, o in cs]
    if not on_time:
        return {}
    keep = spark.createDataFrame(on_time, "partition INT, offset LONG")
    events = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("endingOffsets", "latest").load()
              .join(keep, ["partition", "offset"])
              .select(F.col("key").cast("string").alias("device"),
                      F.get_json_object(F.col("value").cast("string"), "$.ts").try_cast("timestamp").alias("ts"),
                      F.get_json_object(F.col("value").cast("string"), "$.temp").try_cast("double").alias("temp")))
    rows = (events.groupBy("device", F.window("ts", window))
            .agg(F.count("*").alias("n"), F.avg("temp").alias("avg"),
                 F.min("temp").alias("min"), F.max("temp").alias("max"))
            .select("device", F.unix_micros("window.start").alias("start"), "n", "avg", "min", "max")
            .collect())
    return {(r.device, r.start): (r.n, r.avg, r.min, r.max) for r in rows}


def read_results(spark: SparkSession, table: str) -> List[tuple]:
    """(device, start micros, n, avg, min, max, batch_id) per row of the results table."""
    return [tuple(r) for r in spark.read.format("delta").load(table).select(
        "device", F.unix_micros("window.start").alias("start"), "n", "avg_temp", "min_temp",
        "max_temp", "batch_id").collect()]


def read_dead_letter(spark: SparkSession, table: str) -> List[tuple]:
    """(partition, offset, reason kind, watermark micros, batch_id, value) per row."""
    rows = spark.read.format("delta").load(table).select(
        "partition", "offset", "kw_reason", F.unix_micros("kw_watermark").alias("wm"),
        "batch_id", "value").collect()
    return [(r.partition, r.offset, "late" if "watermark" in r.kw_reason else r.kw_reason,
             r.wm, r.batch_id, r.value) for r in rows]


def duplicates(keys) -> int:
    return sum(n - 1 for n in Counter(keys).values() if n > 1)
