"""The interval join's test input (tests/test_interval_join.py, tests/test_join_metrics.py): both
sides' schemas and micro-batches, the join's options, and the helpers that write them."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import List, Optional, Tuple

from pyspark.sql import SparkSession

from interval_join_model import Row
from support import Replay

S = 1_000_000
LEFT = "device STRING, ts TIMESTAMP, temp INT"
RIGHT = "device STRING, raised_at TIMESTAMP, code STRING"
EPOCH = datetime.datetime(2026, 11, 28, tzinfo=datetime.timezone.utc)
T0 = int(EPOCH.timestamp()) * S
BEFORE, AFTER, LATENESS = 10 * S, 30 * S, 20 * S
OPTIONS = dict(key="device", left_time="ts", right_time="raised_at", before="10 seconds", after="30 seconds",
               lateness="20 seconds")


def at(micros: Optional[int]) -> Optional[datetime.datetime]:
    return None if micros is None else EPOCH + datetime.timedelta(microseconds=micros - T0)


def side(spark: SparkSession, root: Path, schema: str) -> Replay:
    """One side's micro-batches as parquet files, one per batch (an empty one for a batch
    without rows), so that both sides' batches line up."""
    return Replay(spark, root, schema, empty_batches=True)


def s(seconds: Optional[int]) -> Optional[int]:
    return None if seconds is None else T0 + seconds * S


# Readings (left) and alarms (right). "a" and "b" report in step; "up" uploads minutes behind
# them (its rows would be behind a global watermark); some rows are late for their own key;
# the last batch has rows with a null key and a null time on both sides.
BATCHES: List[Tuple[List[Row], List[Row]]] = [
    ([("a", s(10), 1), ("b", s(12), 2)],
     [("a", s(15), "a1"), ("b", s(50), "b1"), ("up", s(-300), "u1")]),
    ([("a", s(70), 3), ("b", s(75), 4), ("up", s(-290), 5)],
     [("a", s(65), "a2"), ("b", s(100), "b2")]),
    ([("a", s(130), 6), ("up", s(-230), 7), ("up", s(-225), 8), ("zz", s(140), 9)],
     [("a", s(20), "a3"), ("up", s(-220), "u2"), ("b", s(30), "b3")]),
    ([("b", s(190), 10), ("up", s(-170), 11), ("a", s(50), 12)],
     [("a", s(180), "a4"), ("b", s(185), "b4")]),
    ([("up", s(-400), 13), ("up", s(-110), 14), (None, s(200), 15), ("b", None, 16)],
     [("a", s(240), "a5"), (None, s(200), "n1"), ("b", None, "b5"), ("up", s(-100), "u3")]),
]
