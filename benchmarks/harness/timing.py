"""One timed run of a method: wall time, driver JVM CPU time, heap, state metrics."""

from __future__ import annotations

import datetime
import os
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from pyspark.sql import SparkSession

import keyed_watermarks as kw
from harness.data import SCHEMA
from harness.methods import writer_for


class HeapSampler:
    """Samples the driver JVM's used heap (Runtime total - free) every `interval` seconds."""

    def __init__(self, spark: SparkSession, interval: float = 0.1) -> None:
        self.runtime = spark.sparkContext._jvm.java.lang.Runtime.getRuntime()
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        used = self.runtime.totalMemory() - self.runtime.freeMemory()
        self.peak = max(self.peak, used)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception:  # py4j shutting down
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> "HeapSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


@dataclass
class Run:
    wall_s: float
    input_rows: int
    batches: int
    output_rows: Optional[int]
    peak_heap_bytes: int
    state_rows: Optional[int]
    state_memory_bytes: Optional[int]
    state_custom: Dict[str, float] = field(default_factory=dict)
    # (batchId, start ms, end ms, input rows) per micro-batch, from the query's progress
    batch_times: List[List[int]] = field(default_factory=list)
    # CPU time (user + system) of the driver JVM during the run (local mode: the tasks too;
    # not the Python workers): less sensitive than wall time to other load on the machine
    jvm_cpu_s: Optional[float] = None
    # ours: late rows dropped, summed over the batches' `kw.metrics(...)["late_rows"]`
    late_rows: Optional[int] = None
    # per phase of Spark's `durationMs` (addBatch, queryPlanning, ...), its median over the
    # micro-batches that read rows: where a micro-batch's fixed costs go
    phase_ms: Dict[str, float] = field(default_factory=dict)


def run_once(spark: SparkSession, method: str, input_dir: Path, work: Path) -> Run:
    ckpt = Path(tempfile.mkdtemp(prefix=f"ckpt-{method}-", dir=work))
    events = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(str(input_dir)))
    writer = (writer_for(method, events).option("checkpointLocation", str(ckpt))
              .trigger(availableNow=True))
    spark.sparkContext._jvm.System.gc()
    pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
    with HeapSampler(spark) as heap:
        cpu0 = process_cpu_s(pid)
        t0 = time.perf_counter()
        query = writer.start()
        query.awaitTermination()
        wall = time.perf_counter() - t0
        cpu1 = process_cpu_s(pid)
    exc = query.exception()
    if exc is not None:
        raise RuntimeError(f"{method}: query failed: {exc}")
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    outs = [p.get("sink", {}).get("numOutputRows", -1) for p in progress]
    output_rows = sum(outs) if outs and all(o is not None and o >= 0 for o in outs) else None
    state_rows = state_mem = None
    custom: Dict[str, float] = {}
    with_state = [p for p in progress if p.get("stateOperators")]
    if with_state:
        ops = with_state[-1]["stateOperators"]
        state_rows = sum(op.get("numRowsTotal", 0) for op in ops)
        state_mem = sum(op.get("memoryUsedBytes", 0) for op in ops)
        for op in ops:
            for k, v in (op.get("customMetrics") or {}).items():
                custom[k] = custom.get(k, 0) + v
    shutil.rmtree(ckpt, ignore_errors=True)
    late = (sum(kw.metrics(p).get("late_rows") or 0 for p in progress)
            if method == "keyed" else None)
    return Run(wall, rows, len(progress), output_rows, heap.peak, state_rows, state_mem, custom,
               batch_times(progress),
               cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None, late,
               phase_medians(progress))


def phase_medians(progress: List[dict]) -> Dict[str, float]:
    """Each `durationMs` phase's median over the micro-batches that read rows."""
    phases: Dict[str, List[int]] = {}
    for p in progress:
        if p["numInputRows"] > 0:
            for k, v in p["durationMs"].items():
                phases.setdefault(k, []).append(v)
    return {k: float(statistics.median(v)) for k, v in sorted(phases.items())}


def process_cpu_s(pid: int) -> Optional[float]:
    """utime + stime of a process from /proc (Linux; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def batch_times(progress: List[dict]) -> List[List[int]]:
    out = []
    for p in progress:
        start = datetime.datetime.strptime(p["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc)
        start_ms = int(start.timestamp() * 1000)
        out.append([p["batchId"], start_ms, start_ms + p["durationMs"]["triggerExecution"],
                    p["numInputRows"]])
    return out
