"""Emission delay: which micro-batch emits each window against the one whose rows close it."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession

import latency
from harness.data import LATENESS_US, SCHEMA, WINDOW_US
from harness.methods import result_frame
from harness.timing import Run, batch_times


def emission_run(spark: SparkSession, method: str, input_dir: Path, work: Path):
    """One untimed run whose foreachBatch sink records, per emitted window, the micro-batch that
    emitted it. Returns (device index, window start micros, emitting batch id) arrays and the
    run's per-batch timings."""
    ckpt = Path(tempfile.mkdtemp(prefix=f"ckpt-emit-{method}-", dir=work))
    events = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(str(input_dir)))
    tables: List[pa.Table] = []
    query = (result_frame(method, events).writeStream.foreachBatch(latency.window_recorder(tables))
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{method}: emission run failed: {query.exception()}")
    times = batch_times(query.recentProgress)
    shutil.rmtree(ckpt, ignore_errors=True)
    if not tables:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), times
    t = pa.concat_tables(tables)
    dev = np.array([int(d.rsplit("-", 1)[1]) for d in t.column("device").to_pylist()], np.int64)
    return (dev, t.column("start").to_numpy().astype(np.int64),
            t.column("batch_id").to_numpy().astype(np.int64), times)


def closing_file(method: str, rows, keys: int, dev: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per window (dev, start): the input file (= data micro-batch, in order) whose rows move the
    method's watermark to or past the window's end (-1: never). Ours and the Python competitor:
    the key's watermark, max event time of the key - lateness; native: Spark's global one,
    max event time of all rows - lateness."""
    all_dev, all_ts, all_file = rows
    end = start + WINDOW_US
    files = int(all_file.max()) + 1
    bounds = np.searchsorted(all_file, np.arange(files + 1))  # rows are in file order
    out = np.full(len(start), -1, np.int64)
    if method == "native":
        wm = np.maximum.accumulate(
            np.array([all_ts[bounds[b]:bounds[b + 1]].max() for b in range(files)])) - LATENESS_US
        first = np.searchsorted(wm, end, side="left")  # first file with wm >= end
        out = np.where(first < files, first, -1)
        return out
    key_max = np.full(keys, np.iinfo(np.int64).min // 2)
    for b in range(files):
        sl = slice(bounds[b], bounds[b + 1])
        np.maximum.at(key_max, all_dev[sl], all_ts[sl])
        out[(out < 0) & (key_max[dev] - LATENESS_US >= end)] = b
    return out


def emission_delay(method: str, emitted, rows, keys: int, timed: Optional["Run"]) -> Dict[str, float]:
    """Per emitted window: micro-batches and processing time between the batch whose rows close
    it (move the watermark past its end) and the batch that emits it. Batch ids come from the
    recording run; times from `timed` (a timed noop run, same batch ids) when its batches line
    up, else from the recording run itself."""
    dev, start, emit_batch, rec_times = emitted
    if len(dev) == 0:
        return {}
    times = timed.batch_times if timed and len(timed.batch_times) == len(rec_times) else rec_times
    by_id = {b[0]: b for b in times}
    data_batches = [b[0] for b in times if b[3] > 0]  # file i is the i-th data batch
    close = closing_file(method, rows, keys, dev, start)
    known = close >= 0
    close_batch = np.array([data_batches[f] if f >= 0 else -1 for f in close], np.int64)
    delay = emit_batch[known] - close_batch[known]
    end_ms = np.array([by_id[b][2] for b in emit_batch[known]], np.float64)
    close_end = np.array([by_id[b][2] for b in close_batch[known]], np.float64)
    close_start = np.array([by_id[b][1] for b in close_batch[known]], np.float64)

    def pct(x, q):
        return float(np.percentile(x, q, method="inverted_cdf")) if len(x) else float("nan")
    return {
        "windows": int(len(dev)), "unmatched": int((~known).sum()),
        "negative": int((delay < 0).sum()),
        "batches_p50": pct(delay, 50), "batches_p95": pct(delay, 95), "batches_max": float(delay.max()),
        "ms_p50": pct(end_ms - close_end, 50), "ms_p95": pct(end_ms - close_end, 95),
        "close_to_out_ms_p50": pct(end_ms - close_start, 50),
        "close_to_out_ms_p95": pct(end_ms - close_start, 95),
        "times_from": "timed run" if times is not rec_times else "recording run",
    }
