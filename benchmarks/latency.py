"""Latency at a 1-second trigger with a steady input (`run_benchmarks.py --latency`).

A feeder thread makes one pre-generated parquet file visible in the query's input directory per
second (copied under a hidden name, which Spark's file source ignores, then renamed: the rename
is atomic, so a file is never read half-written), and records the wall time of each rename: the
*arrival* time of the file's rows. Every method gets the same files on the same schedule, each
in its own input directory and run, one after the other. The query reads the directory with no
``maxFilesPerTrigger`` (a slow batch is followed by one that takes the backlog, as in
production), ``trigger(processingTime="1 second")``, and a ``foreachBatch`` sink that records
which micro-batch emitted each window. After the last file the harness waits for the query to
process everything available, then stops it.

Two measures per run (batches that started, and windows whose closing file arrived, in the first
``warmup_s`` seconds are left out):

- *batch duration*: ``durationMs.triggerExecution`` of each micro-batch in ``recentProgress``
  (no-data batches included: Spark's native aggregation runs them to emit and evict);
- *input-to-output latency* of a window: end of the micro-batch that emitted it (its progress
  ``timestamp`` + ``triggerExecution``) - arrival of the file whose rows moved the method's
  watermark to or past the window's end (ours: the key's watermark; native: Spark's global one),
  i.e. from the moment the window's result is determined by the input to the moment it has been
  handed to the sink.
"""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, functions as F


class FileFeeder(threading.Thread):
    """Makes `files[i]` visible in `input_dir` at start + i * interval_s; arrival_ms[i] is the
    wall time (epoch ms) right after its rename."""

    def __init__(self, files: List[Path], input_dir: Path, interval_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.files = files
        self.input_dir = input_dir
        self.interval_s = interval_s
        self.arrival_ms: List[float] = []
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            start = time.time()
            for i, src in enumerate(self.files):
                time.sleep(max(0.0, start + i * self.interval_s - time.time()))
                hidden = self.input_dir / f".{src.name}.tmp"  # hidden: the file source skips it
                shutil.copyfile(src, hidden)
                now = time.time()
                os.utime(hidden, (now, now))
                os.rename(hidden, self.input_dir / src.name)
                self.arrival_ms.append(time.time() * 1000.0)
        except BaseException as e:  # reported by latency_run
            self.error = e


def _batch_rows(progress: List[dict]) -> List[Dict[str, float]]:
    out = []
    for p in progress:
        start = datetime.datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc)
        start_ms = start.timestamp() * 1000.0
        dur = p["durationMs"]["triggerExecution"]
        out.append({"id": p["batchId"], "start_ms": start_ms, "end_ms": start_ms + dur,
                    "ms": dur, "rows": p["numInputRows"]})
    return out


def window_recorder(tables: List[pa.Table]) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function appending each batch's emitted windows to `tables`: (device,
    window start micros, batch id), so a run can tell which batch emitted each window."""
    def record(batch: DataFrame, batch_id: int) -> None:
        t = (batch.select(F.col("device"), F.unix_micros(F.col("window.start")).alias("start"))
             .toArrow())
        if t.num_rows:
            tables.append(t.append_column("batch_id", pa.array(np.full(t.num_rows, batch_id))))
    return record


def latency_run(spark: SparkSession, schema: str, frame: Callable[[DataFrame], DataFrame],
                files: List[Path], work: Path, name: str) -> Dict[str, object]:
    """One run: start the query on an empty directory, feed `files` one per second, wait until
    all are processed. Returns arrival times, per-batch progress and the emitted windows."""
    input_dir = Path(tempfile.mkdtemp(prefix=f"lat-in-{name}-", dir=work))
    ckpt = Path(tempfile.mkdtemp(prefix=f"lat-ckpt-{name}-", dir=work))
    tables: List[pa.Table] = []
    record = window_recorder(tables)
    events = spark.readStream.schema(schema).parquet(str(input_dir))
    query = (frame(events).writeStream.foreachBatch(record)
             .option("checkpointLocation", str(ckpt))
             .trigger(processingTime="1 second").start())
    feeder = FileFeeder(files, input_dir)
    try:
        feeder.start()
        feeder.join()
        if feeder.error is not None:
            raise RuntimeError(f"{name}: feeding the input failed: {feeder.error}")
        query.processAllAvailable()
        time.sleep(2.5)  # native emits its last windows in the following (no-data) batches
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"{name}: latency query failed: {query.exception()}")
    batches = _batch_rows(query.recentProgress)
    shutil.rmtree(ckpt, ignore_errors=True)
    shutil.rmtree(input_dir, ignore_errors=True)
    t = pa.concat_tables(tables) if tables else None
    return {"arrival_ms": feeder.arrival_ms, "batches": batches, "emitted": t}


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q, method="inverted_cdf")) if len(x) else float("nan")


def summarise(run: Dict[str, object], close_file: np.ndarray, warmup_s: float,
              fed_rows: int) -> Dict[str, float]:
    """Batch durations and input-to-output latencies of one run (see the module docstring).
    `close_file[j]`: the index of the file whose rows close the j-th emitted window (-1: none
    by the data, e.g. a window emitted only because the query ended, which cannot happen here)."""
    arrival = np.array(run["arrival_ms"], np.float64)
    batches = run["batches"]
    cutoff = arrival[0] + warmup_s * 1000.0
    by_id = {b["id"]: b for b in batches}
    timed = [b for b in batches if b["start_ms"] >= cutoff]
    dur = np.array([b["ms"] for b in timed], np.float64)
    out: Dict[str, float] = {
        "batches": len(timed), "data_batches": sum(1 for b in timed if b["rows"] > 0),
        "batch_ms_p50": _pct(dur, 50), "batch_ms_p95": _pct(dur, 95),
        "batch_ms_max": float(dur.max()) if len(dur) else float("nan"),
        "rows_read": int(sum(b["rows"] for b in batches)), "rows_fed": fed_rows,
    }
    t = run["emitted"]
    if t is None:
        out.update({"windows": 0})
        return out
    emit_end = np.array([by_id[b]["end_ms"] for b in t.column("batch_id").to_pylist()], np.float64)
    known = close_file >= 0
    lat = emit_end[known] - arrival[close_file[known]]
    lat = lat[arrival[close_file[known]] >= cutoff]
    out.update({
        "windows": int(t.num_rows), "windows_timed": int(len(lat)),
        "unmatched": int((~known).sum()),
        # a window out before the rows that close it arrived: a bug in the harness or the method
        "negative": int((lat < 0).sum()),
        "latency_ms_p50": _pct(lat, 50), "latency_ms_p95": _pct(lat, 95),
        "latency_ms_max": float(lat.max()) if len(lat) else float("nan"),
    })
    return out
