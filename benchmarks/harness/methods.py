"""The benchmarked methods: each one's streaming query over the same events (adding a
method touches this file: METHODS, METHOD_TITLES, result_frame or writer_for)."""

from __future__ import annotations

from typing import Any, Dict

from pyspark.sql import DataFrame, functions as F
from pyspark.sql.streaming import DataStreamWriter

import keyed_watermarks as kw
from harness import floor
from harness.data import LATENESS, LATENESS_US, WINDOW, WINDOW_US
from python_keyed import python_keyed_windows
from python_tws import python_tws_windows

METHODS = ["native", "keyed", "python", "python_tws", "stateless", "tws_floor"]
# Methods that emit no windows: no emission delay, no latency run.
WINDOWLESS_METHODS = ("stateless", "tws_floor")
# The pure-Python competitors: one Python call per key and micro-batch (--python-max-keys), and
# their output is checked against ours before timing (check_competitors).
PYTHON_METHODS = ("python", "python_tws")
METHOD_TITLES = {
    "native": "Spark native withWatermark + groupBy(device, window)",
    "keyed": "keyed-watermarks (ours)",
    "python": "pure-Python keyed (applyInPandasWithState)",
    "python_tws": "pure-Python keyed (transformWithStateInPandas, value + map state)",
    "stateless": "limit: stateless groupBy(device, window) per batch (foreachBatch)",
    "tws_floor": "floor: minimal JVM transformWithState, one value and one row per key per batch",
}



def aggregates():
    return [F.count("*").alias("n"), F.avg("temp").alias("avg_temp")]


# More keyword arguments of kw.keyed_watermark for the keyed method (--keyed-options).
KEYED_OPTIONS: Dict[str, Any] = {}
# More keyword arguments of .window(...) for the keyed method (--keyed-window-options), e.g.
# emit="every_batch" (early panes: docs/semantics.md, "Panes and accumulation").
KEYED_WINDOW_OPTIONS: Dict[str, Any] = {}
# The output mode of native and keyed (--output-mode): "update" compares early panes with
# Spark's own update mode on the same stream.
OUTPUT_MODE = "append"


def result_frame(method: str, events: DataFrame) -> DataFrame:
    """The streaming result of a stateful method: device, window, n, avg_temp (append mode)."""
    if method == "native":
        return (events.withWatermark("ts", LATENESS)
                .groupBy("device", F.window("ts", WINDOW)).agg(*aggregates()))
    if method == "keyed":
        return (kw.keyed_watermark(events, key="device", event_time="ts", lateness=LATENESS, **KEYED_OPTIONS)
                .window(WINDOW, **KEYED_WINDOW_OPTIONS).agg(*aggregates()))
    if method == "python":
        return python_keyed_windows(events, LATENESS_US, WINDOW_US)
    if method == "python_tws":
        return python_tws_windows(events, LATENESS_US, WINDOW_US)
    raise ValueError(method)


def writer_for(method: str, events: DataFrame) -> DataStreamWriter:
    if method in ("native", "keyed"):
        return result_frame(method, events).writeStream.format("noop").outputMode(OUTPUT_MODE)
    if method in PYTHON_METHODS:
        return result_frame(method, events).writeStream.format("noop").outputMode("append")
    if method == "tws_floor":
        return floor.floor_frame(events).writeStream.format("noop").outputMode("append")
    if method == "stateless":
        def per_batch(batch: DataFrame, batch_id: int) -> None:
            (batch.groupBy("device", F.window("ts", WINDOW)).agg(*aggregates())
             .write.format("noop").mode("overwrite").save())
        return events.writeStream.foreachBatch(per_batch)
    raise ValueError(method)
