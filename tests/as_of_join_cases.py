"""The as-of join's test input (tests/test_as_of_join.py, tests/test_join_metrics.py): both sides'
schemas and micro-batches, the lateness and versions delay, and the helpers that write them."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import List, Optional, Tuple

from pyspark.sql import SparkSession

from join_model import Row
from support import Replay

S = 1_000_000
READINGS = "device STRING, ts TIMESTAMP, temp INT"
VERSIONS = "device STRING, valid_from TIMESTAMP, firmware STRING"
EPOCH = datetime.datetime(2026, 11, 27, tzinfo=datetime.timezone.utc)
T0 = int(EPOCH.timestamp()) * S


def at(micros: Optional[int]) -> Optional[datetime.datetime]:
    return None if micros is None else EPOCH + datetime.timedelta(microseconds=micros - T0)


def side(spark: SparkSession, root: Path, schema: str) -> Replay:
    """One side's micro-batches as parquet files for the file source: one file per batch, an
    empty file for a batch without rows, so both sides' batches line up."""
    return Replay(spark, root, schema, empty_batches=True)


# The delayed device: "up" uploads its readings minutes after the others' (its clock trails by
# 5 minutes), its firmware changed once; "a" and "b" report in step, their firmware changes often;
# the last batch has a reading and a version with a null key and with a null time.
BATCHES: List[Tuple[List[Row], List[Row]]] = [
    ([("a", T0 + 10 * S, 1), ("b", T0 + 12 * S, 2)],
     [("a", T0 + 0 * S, "a1"), ("b", T0 + 5 * S, "b1"), ("up", T0 - 600 * S, "u1")]),
    ([("a", T0 + 70 * S, 3), ("b", T0 + 75 * S, 4), ("up", T0 - 290 * S, 5)],
     [("a", T0 + 60 * S, "a2"), ("b", T0 + 65 * S, "b2")]),
    ([("a", T0 + 130 * S, 6), ("up", T0 - 230 * S, 7), ("up", T0 - 225 * S, 8), ("zz", T0 + 140 * S, 9)],
     [("a", T0 + 120 * S, "a3"), ("b", T0 + 125 * S, "b3"), ("up", T0 - 228 * S, "u2")]),
    ([("b", T0 + 190 * S, 10), ("up", T0 - 170 * S, 11), ("a", T0 + 50 * S, 12)],
     [("a", T0 + 180 * S, "a4"), ("b", T0 + 185 * S, "b4")]),
    ([("up", T0 - 400 * S, 13), ("up", T0 - 110 * S, 14), (None, T0 + 200 * S, 15), ("b", None, 16)],
     [("a", T0 + 240 * S, "a5"), (None, T0 + 200 * S, "n1"), ("b", None, "b5")]),
]
LATENESS = 30 * S
DELAY = 5 * S
