#!/usr/bin/env python3
"""End-to-end benchmark: keyed watermarks against Spark's native watermark aggregation, two
pure-Python keyed implementations (applyInPandasWithState, transformWithStateInPandas), a
stateless lower bound and, optionally, Apache Flink's TUMBLE, on the same generated IoT data.

    .venv/bin/python benchmarks/run_benchmarks.py            # full run
    .venv/bin/python benchmarks/run_benchmarks.py --quick    # smoke test (~3 min)
    .venv/bin/python benchmarks/run_benchmarks.py --spark 4.0 --methods native,keyed  # on Spark 4.0
    .venv/bin/python benchmarks/run_benchmarks.py --with-flink   # + Flink (benchmarks/flink_setup)
    .venv/bin/python benchmarks/run_benchmarks.py --latency      # 1 s trigger latency (latency.py)

See benchmarks/README.md for what is measured and how. Results: a markdown table on stdout and
in benchmarks/results/latest.md (--quick: benchmarks/results/quick.md), raw numbers next to it
as .json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent


def _spark_line_requested(argv: List[str]) -> Optional[str]:
    for i, a in enumerate(argv):
        if a == "--spark":
            return argv[i + 1] if i + 1 < len(argv) else ""
        if a.startswith("--spark="):
            return a[len("--spark="):]
    return None


def _run_in_spark_venv(argv: List[str]) -> None:
    """`--spark 4.0`: re-runs this harness with that Spark line's venv (dev/venv creates it if
    missing), before pyspark is imported; keyed_watermarks there picks the line's jar."""
    import importlib.metadata
    import subprocess

    minor = _spark_line_requested(argv)
    if minor is None:
        return
    try:
        installed = importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        installed = ""
    if installed.startswith(minor + "."):
        return
    proc = subprocess.run([str(HERE.parent / "dev" / "venv"), minor], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"--spark {minor}: dev/venv {minor} failed (exit {proc.returncode})")
    python = HERE.parent / proc.stdout.strip() / "bin" / "python"
    os.execv(str(python), [str(python), str(Path(__file__).resolve()), *argv])


if __name__ == "__main__":
    _run_in_spark_venv(sys.argv[1:])

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

sys.path.insert(0, str(HERE))

from pyspark.sql import DataFrame, SparkSession, functions as F  # noqa: E402
from pyspark.sql.streaming import DataStreamWriter  # noqa: E402

import keyed_watermarks as kw  # noqa: E402
import latency  # noqa: E402
from python_keyed import python_keyed_windows  # noqa: E402
from python_tws import python_tws_windows  # noqa: E402

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"
WINDOW, WINDOW_US = "10 seconds", 10_000_000
LATENESS, LATENESS_US = "5 seconds", 5_000_000
# Event time covered by one micro-batch: rows are spread evenly over it (then jittered), so a
# key's watermark advances as long as the key keeps reporting.
BATCH_SPAN_US = 5_000_000
T0_US = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
DELAYED_FRACTION = 0.2  # rows that arrive out of order ...
MEAN_DELAY_US = 1_000_000  # ... by an exponential delay (mean 1 s) ...
MAX_DELAY_US = 8_000_000  # ... capped at 8 s (a few end up behind their key's watermark)

METHODS = ["native", "keyed", "python", "python_tws", "stateless"]
# The pure-Python competitors: one Python call per key and micro-batch (--python-max-keys), and
# their output is checked against ours before timing (check_competitors).
PYTHON_METHODS = ("python", "python_tws")
METHOD_TITLES = {
    "native": "Spark native withWatermark + groupBy(device, window)",
    "keyed": "keyed-watermarks (ours)",
    "python": "pure-Python keyed (applyInPandasWithState)",
    "python_tws": "pure-Python keyed (transformWithStateInPandas, value + map state)",
    "stateless": "limit: stateless groupBy(device, window) per batch (foreachBatch)",
}


# ----------------------------------------------------------------------------- data


@dataclass
class Config:
    name: str
    regime: str
    rows_per_batch: int
    batches: int
    keys: int
    seed: int

    @property
    def total_rows(self) -> int:
        return self.rows_per_batch * self.batches


def configurations(args: argparse.Namespace) -> List[Config]:
    if args.quick:
        return [Config("quick", "smoke", 2_000, 5, 100, seed=7)]
    keys = [1_000, 100_000] + ([1_000_000] if args.with_1m_keys else [])
    out = []
    for k in keys:
        out.append(Config(f"small/{_k(k)}", "small batches (latency)", args.small_rows,
                          args.small_batches, k, seed=11 + k))
    for k in keys:
        out.append(Config(f"large/{_k(k)}", "large batches (throughput)", args.large_rows,
                          args.large_batches, k, seed=23 + k))
    if args.configs:
        wanted = set(args.configs.split(","))
        out = [c for c in out if c.name in wanted]
    return out


def _k(n: int) -> str:
    return f"{n // 1_000_000}M keys" if n >= 1_000_000 else f"{n // 1_000}k keys"


def generate(cfg: Config, input_dir: Path, span_us: int = BATCH_SPAN_US,
             set_mtimes: bool = True) -> Dict[str, float]:
    """Writes cfg.batches parquet files (one per micro-batch, mtimes increasing).

    Row i of the stream has event time T0 + i * span_us / rows_per_batch (so every batch
    covers span_us of event time, BATCH_SPAN by default), minus a delay for DELAYED_FRACTION of the rows; its device
    is drawn uniformly from cfg.keys devices. So each device's events are mostly in order, with
    a little out-of-orderness. Returns the open (key, window) counts each semantics leaves in
    state at the end (for state bytes per open window).
    """
    rng = np.random.default_rng(cfg.seed)
    input_dir.mkdir(parents=True, exist_ok=True)
    names = np.array([f"device-{i:07d}" for i in range(cfg.keys)], dtype=object)
    all_dev, all_ts, all_batch = [], [], []
    for b in range(cfg.batches):
        n = cfg.rows_per_batch
        i = np.arange(b * n, (b + 1) * n, dtype=np.int64)
        dev = rng.integers(0, cfg.keys, n)
        ts = T0_US + (i * span_us) // n
        delay = np.minimum(rng.exponential(MEAN_DELAY_US, n), MAX_DELAY_US).astype(np.int64)
        ts = ts - np.where(rng.random(n) < DELAYED_FRACTION, delay, 0)
        temp = 20.0 + 5.0 * np.sin(dev / 7.0) + rng.normal(0.0, 0.5, n)
        table = pa.table({
            "device": pa.array(names[dev], pa.string()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "temp": pa.array(temp, pa.float64()),
        })
        path = input_dir / f"batch-{b:05d}.parquet"
        pq.write_table(table, path)
        if set_mtimes:  # the file source orders by mtime
            os.utime(path, (1_000_000 + b, 1_000_000 + b))
        all_dev.append(dev)
        all_ts.append(ts)
        all_batch.append(np.full(n, b, dtype=np.int32))
    dev = np.concatenate(all_dev)
    ts = np.concatenate(all_ts)
    start = ts - np.mod(ts, WINDOW_US)
    # Keyed: a (key, window) is still open when its end > max event time of the key - L
    # (every row of such a window was on time, since wm(k) only grows).
    key_max = np.full(cfg.keys, np.iinfo(np.int64).min)
    np.maximum.at(key_max, dev, ts)
    open_keyed = _distinct_pairs(dev, start, start + WINDOW_US > key_max[dev] - LATENESS_US)
    # Native: Spark keeps the (key, window) groups whose end > global max - L.
    open_native = _distinct_pairs(dev, start, start + WINDOW_US > ts.max() - LATENESS_US)
    late_keyed = keyed_late_rows(cfg.keys, dev, ts, np.concatenate(all_batch))
    return {"open_keyed": open_keyed, "open_native": open_native,
            "keys_seen": int(len(np.unique(dev))),
            "late_keyed": late_keyed,
            # for closing_file(): device index, event time, file (= data micro-batch) per row
            "rows": (dev, ts, np.concatenate(all_batch))}


def keyed_late_rows(keys: int, dev: np.ndarray, ts: np.ndarray, batch: np.ndarray) -> int:
    """Rows ours drops as late with one file per micro-batch: a row whose window end <= its
    key's watermark at the start of the batch (docs/semantics.md). The harness checks it against
    the query's own `late_rows` metric (main), so Flink's accuracy can be set next to ours."""
    end = ts - np.mod(ts, WINDOW_US) + WINDOW_US
    key_max = np.full(keys, np.iinfo(np.int64).min // 2)
    late = 0
    bounds = np.searchsorted(batch, np.arange(int(batch.max()) + 2))  # rows are in batch order
    for b in range(len(bounds) - 1):
        sl = slice(bounds[b], bounds[b + 1])
        late += int((end[sl] <= key_max[dev[sl]] - LATENESS_US).sum())
        np.maximum.at(key_max, dev[sl], ts[sl])
    return late


def _distinct_pairs(dev: np.ndarray, start: np.ndarray, mask: np.ndarray) -> int:
    if not mask.any():
        return 0
    pairs = dev[mask].astype(np.int64) * (1 << 40) + (start[mask] - T0_US) // WINDOW_US
    return int(len(np.unique(pairs)))


# ----------------------------------------------------------------------------- queries


def aggregates():
    return [F.count("*").alias("n"), F.avg("temp").alias("avg_temp")]


# More keyword arguments of kw.keyed_watermark for the keyed method (--keyed-options).
KEYED_OPTIONS: Dict[str, Any] = {}


def result_frame(method: str, events: DataFrame) -> DataFrame:
    """The streaming result of a stateful method: device, window, n, avg_temp (append mode)."""
    if method == "native":
        return (events.withWatermark("ts", LATENESS)
                .groupBy("device", F.window("ts", WINDOW)).agg(*aggregates()))
    if method == "keyed":
        return (kw.keyed_watermark(events, key="device", event_time="ts", lateness=LATENESS, **KEYED_OPTIONS)
                .window(WINDOW).agg(*aggregates()))
    if method == "python":
        return python_keyed_windows(events, LATENESS_US, WINDOW_US)
    if method == "python_tws":
        return python_tws_windows(events, LATENESS_US, WINDOW_US)
    raise ValueError(method)


def writer_for(method: str, events: DataFrame) -> DataStreamWriter:
    if method in ("native", "keyed") + PYTHON_METHODS:
        return result_frame(method, events).writeStream.format("noop").outputMode("append")
    if method == "stateless":
        def per_batch(batch: DataFrame, batch_id: int) -> None:
            (batch.groupBy("device", F.window("ts", WINDOW)).agg(*aggregates())
             .write.format("noop").mode("overwrite").save())
        return events.writeStream.foreachBatch(per_batch)
    raise ValueError(method)


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
               cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else None, late)


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


# ----------------------------------------------------------------------------- emission delay


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


# ----------------------------------------------------------------------------- check


def check_competitors(spark: SparkSession, input_dir: Path, work: Path,
                      competitors: List[str]) -> str:
    """Each pure-Python competitor must emit the same windows, with the same counts and averages,
    as ours (all windows closed by the end of the data, in memory sinks, AvailableNow)."""
    results = {}
    for method in ["keyed"] + competitors:
        ev = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
        name = f"kwcheck_{method}_{int(time.time() * 1000)}"
        q = (result_frame(method, ev).writeStream.format("memory").queryName(name)
             .outputMode("append")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="check-", dir=work))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"competitor check: {method} failed: {q.exception()}")
        rows = spark.sql(f"SELECT device, window.start AS s, n, avg_temp FROM {name}").collect()
        spark.catalog.dropTempView(name)
        results[method] = {(r.device, r.s): (r.n, r.avg_temp) for r in rows}
        if len(results[method]) != len(rows):
            raise AssertionError(f"competitor check: {method} emitted a window more than once")
    a = results["keyed"]
    if not a:
        raise AssertionError("competitor check: ours emitted no window (the data closes none?)")
    for method in competitors:
        b = results[method]
        if a.keys() != b.keys():
            raise AssertionError(
                f"competitor check: windows differ: {len(a)} ours vs {len(b)} {method}, "
                f"e.g. {sorted(a.keys() ^ b.keys())[:3]}")
        for k in a:
            (n1, v1), (n2, v2) = a[k], b[k]
            if n1 != n2 or abs(v1 - v2) > 1e-9 * max(1.0, abs(v1)):
                raise AssertionError(f"competitor check: {k}: ours {a[k]} vs {method} {b[k]}")
    return (f"the pure-Python competitor{'s' if len(competitors) > 1 else ''} "
            f"({', '.join(competitors)}) emitted the same {len(a)} windows "
            f"({sum(n for n, _ in a.values()):,} rows) with the same counts and averages as ours")


# ----------------------------------------------------------------------------- report


@dataclass
class Result:
    config: str
    method: str
    total_rows: int
    warmup: Optional[Run]
    runs: List[Run]
    open_windows: Optional[int]
    emission: Optional[Dict[str, float]] = None

    @property
    def median(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "–"
    return f"{n / 2**20:,.1f}"


def _cpu(runs: List[Run]) -> str:
    cpu = [x.jvm_cpu_s for x in runs if x.jvm_cpu_s is not None]
    return f"{statistics.median(cpu):.1f}" if cpu else "–"


def _pair(e: Optional[Dict[str, float]], name: str, fmt: str) -> str:
    if not e or f"{name}_p50" not in e:
        return "–"
    return f"{format(e[name + '_p50'], fmt)} / {format(e[name + '_p95'], fmt)}"


def markdown(results: List[Result], header: List[str], notes: List[str]) -> str:
    lines = list(header)
    lines += [
        "| config | method | rows | batches | timed runs | warm-up s | median s | min–max s "
        "| rows/s | vs native | JVM CPU s | peak heap MiB | state rows | RocksDB mem MiB | state SST KiB "
        "| open (key, window) | SST B / open window | windows out "
        "| emit delay batches p50 / p95 | emit delay ms p50 / p95 | closing batch → out ms p50 / p95 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|---:|---:|---:|",
    ]
    native = {r.config: r.median for r in results if r.method == "native"}
    for r in results:
        last = r.runs[-1]
        walls = [x.wall_s for x in r.runs]
        ratio = native.get(r.config)
        ratio_s = f"{ratio / r.median:.2f}x" if ratio else "–"
        sst = last.state_custom.get("rocksdbSstFileSize")
        sst_s = f"{sst / 1024:,.0f}" if sst else "–"
        per_window = f"{sst / r.open_windows:,.1f}" if sst and r.open_windows else "–"
        lines.append(
            f"| {r.config} | {r.method} | {r.total_rows:,} | {last.batches} | {len(r.runs)} "
            f"| {r.warmup.wall_s:.2f} | {r.median:.2f} | {min(walls):.2f}–{max(walls):.2f} "
            f"| {r.total_rows / r.median:,.0f} | {ratio_s} | {_cpu(r.runs)} "
            f"| {max(x.peak_heap_bytes for x in r.runs) / 2**20:,.0f} "
            f"| {last.state_rows if last.state_rows is not None else '–'} "
            f"| {fmt_bytes(last.state_memory_bytes)} | {sst_s} "
            f"| {r.open_windows if r.open_windows is not None else '–'} | {per_window} "
            f"| {last.output_rows if last.output_rows is not None else '–'} "
            f"| {_pair(r.emission, 'batches', '.0f')} | {_pair(r.emission, 'ms', ',.0f')} "
            f"| {_pair(r.emission, 'close_to_out_ms', ',.0f')} |"
            if r.warmup else "")
    lines += ratio_table(results)
    lines.append("")
    lines += notes
    return "\n".join(lines) + "\n"


def ratio_table(results: List[Result]) -> List[str]:
    """Ours (keyed) against each other method of the same configuration, from this run's medians
    (the issue's targets): *vs X* = X's median / ours (higher: ours faster; vs the stateless
    limit at most about 1), and ours' run-to-run spread, (max - min) / median."""
    by = {(r.config, r.method): r for r in results if r.warmup}
    configs = list(dict.fromkeys(r.config for r in results))
    others = [m for m in ("native", "stateless", "python", "python_tws")
              if any((c, m) in by for c in configs)]
    if not any((c, "keyed") in by for c in configs) or not others:
        return []
    lines = ["", "Ours (keyed) against the others, this run's medians (X's median / ours; the "
             "stateless limit reads and partially aggregates the same rows with no state):", "",
             "| config | " + " | ".join(f"vs {m}" for m in others) + " | ours: spread of timed runs |",
             "|---|" + "---:|" * (len(others) + 1)]
    for c in configs:
        k = by.get((c, "keyed"))
        if k is None:
            continue
        cells = [f"{by[(c, m)].median / k.median:.2f}" if (c, m) in by else "–" for m in others]
        walls = [x.wall_s for x in k.runs]
        lines.append(f"| {c} | " + " | ".join(cells) + f" | {(max(walls) - min(walls)) / k.median:.0%} |")
    return lines


# ----------------------------------------------------------------------------- profiling


def start_recording(spark: SparkSession, out_dir: Path, config: str, method: str):
    """Starts a Java Flight Recording (JDK 'profile' settings: execution samples every 10 ms,
    allocation, GC) in the driver JVM, which in local mode runs the executors too."""
    jvm = spark.sparkContext._jvm
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"{config.replace('/', '_').replace(' ', '_')}__{method}.jfr"
    path = (out_dir / name).resolve()
    rec = jvm.jdk.jfr.Recording(jvm.jdk.jfr.Configuration.getConfiguration("profile"))
    rec.setName(name)
    rec.setDestination(jvm.java.io.File(str(path)).toPath())
    rec.start()
    return rec, path


def stop_recording(recording) -> Path:
    rec, path = recording
    rec.stop()  # writes the destination file
    rec.close()
    return path


# ----------------------------------------------------------------------------- Flink


FLINK_PYTHON = HERE.parent / "build" / "flink-venv" / "bin" / "python"


def run_flink(input_dir: Path, runs: int, work: Path, name: str,
              extra: Optional[List[str]] = None) -> Dict[str, object]:
    """flink_tumble.py in its own venv (benchmarks/flink_setup) on the configuration's files:
    one warm-up and `runs` timed runs into Flink's blackhole sink (none if runs == 0), then one
    collecting run."""
    import subprocess

    out = work / f"flink-{name}.json"
    logf = work / f"flink-{name}.log"
    with open(logf, "w") as lf:
        proc = subprocess.run([str(FLINK_PYTHON), str(HERE / "flink_tumble.py"), "--input",
                               str(input_dir), "--runs", str(runs), "--json-out", str(out)]
                              + (extra or []), stdout=lf, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = logf.read_text().splitlines()[-30:]
        raise RuntimeError(f"flink_tumble.py failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return json.loads(out.read_text())


def delayed_devices_accuracy(spark: SparkSession, work: Path, quick: bool) -> Dict[str, object]:
    """Accuracy on the IoT demo's stream (examples/iot_demo.py: fast, slow and batch-uploading
    devices whose rows arrive minutes late, in order; 1-minute windows, 30 s lateness): the
    demo runs Spark's global watermark and ours on its files (its own metrics), then Flink's
    TUMBLE counts the rows of the same files in its windows."""
    sys.path.insert(0, str(HERE.parent / "examples"))
    import iot_demo

    demo_dir = work / "iot-demo"
    argv = ["--workdir", str(demo_dir), "--out", str(work / "iot-demo.png")]
    metrics = iot_demo.main(argv + (["--quick"] if quick else []), spark=spark)
    cfg = metrics["config"]
    window_s = metrics["window_s"]
    lateness_s = iot_demo._duration_s(cfg["lateness"])
    flink_args = ["--window", str(window_s), "--lateness", str(lateness_s)]
    flink = run_flink(demo_dir / "input", 0, work, "iot-demo", flink_args)
    flink_one = run_flink(demo_dir / "input", 0, work, "iot-demo-one-split",
                          flink_args + ["--one-split"])
    keyed, glob = metrics["methods"]["keyed"], metrics["methods"]["global"]
    return {"events": metrics["events"], "devices": metrics["devices"], "window_s": window_s,
            "lateness_s": lateness_s, "files": metrics["micro_batch_files"], "flink": flink, "flink_one_split": flink_one,
            "keyed_late_rows": keyed["late_rows_reported"],
            "keyed_pct_closed": keyed["pct_events_counted_closed"],
            "global_pct_closed": glob["pct_events_counted_closed"]}


def delayed_devices_markdown(acc: Optional[Dict[str, object]]) -> List[str]:
    if not acc:
        return []
    n = acc["events"]
    f, f1 = acc["flink"], acc["flink_one_split"]
    ours = n - acc["keyed_late_rows"]
    return [
        "", f"Accuracy on the delayed-devices stream (`--with-flink`; the IoT demo's data, "
        f"examples/iot_demo.py: {sum(acc['devices'].values())} devices "
        f"({', '.join(f'{v} {k}' for k, v in acc['devices'].items())}), {n:,} events in {acc['files']} files, "
        f"batch uploaders' rows minutes late; {acc['window_s']} s windows, {acc['lateness_s']} s "
        "lateness): *Flink rows in windows* = rows Flink counted in its windows (every window "
        "fires at the end of the bounded input) / input rows, reading the files as they are "
        "(one split per file, in the source's order, not the arrival order) and as one file "
        "concatenated in arrival order (`--one-split`: the stream's global watermark); *ours aggregated* = input rows - our "
        "`late_rows` metric; *in the windows ours closed* = the demo's own measure (rows counted "
        "in the windows ours emitted, over the true rows of those windows) for Spark's global "
        "watermark and ours.", "",
        "| events | Flink rows in windows, split per file | Flink, one split | ours aggregated "
        "| Spark global, in the windows ours closed | ours, in the windows ours closed |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {n:,} | {f['rows_in_windows']:,} ({f['rows_in_windows'] / n:.2%}) "
        f"| {f1['rows_in_windows']:,} ({f1['rows_in_windows'] / n:.2%}) "
        f"| {ours:,} ({ours / n:.2%}) | {acc['global_pct_closed']:.2f}% "
        f"| {acc['keyed_pct_closed']:.2f}% |",
    ]


def flink_markdown(rows: List[Dict[str, object]], native: Dict[str, float]) -> List[str]:
    if not rows:
        return []
    lines = [
        "", "Apache Flink reference (`--with-flink`, benchmarks/flink_tumble.py): Flink SQL "
        "`TUMBLE(ets, 10 s)` with `WATERMARK FOR ets AS ets - INTERVAL '5' SECOND` over the same "
        "parquet files (bounded filesystem source, parallelism 2, blackhole sink), one "
        "watermark per source split (file), not per device; at the end of the bounded input "
        "every window fires, rows behind the watermark are dropped. *in windows* = rows counted "
        "in Flink's windows / input rows; *ours aggregated* = input rows - rows ours drops as "
        "late (checked against our `late_rows` metric) / input rows.", "",
        "| config | Flink | timed runs | warm-up s | median s | min–max s | rows/s | vs native "
        "| windows | in windows | ours aggregated |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        f = r["flink"]
        total = r["total_rows"]
        ratio = native.get(r["config"])
        ratio_s = f"{ratio / f['median_s']:.2f}x" if ratio else "–"
        lines.append(
            f"| {r['config']} | {f['flink']} | {len(f['runs_s'])} | {f['warmup_s']:.2f} "
            f"| {f['median_s']:.2f} | {min(f['runs_s']):.2f}–{max(f['runs_s']):.2f} "
            f"| {total / f['median_s']:,.0f} | {ratio_s} "
            f"| {f['windows']:,} | {f['rows_in_windows']:,} of {total:,} "
            f"({f['rows_in_windows'] / total:.2%}) "
            f"| {total - r['late_keyed']:,} ({(total - r['late_keyed']) / total:.2%}) |")
    return lines


# ----------------------------------------------------------------------------- latency mode


def main_latency(args: argparse.Namespace, methods: List[str], argv: List[str]) -> int:
    """--latency: the same files fed at one per second to each method in turn (latency.py)."""
    if "stateless" in methods:
        raise SystemExit("--latency: 'stateless' emits no windows; choose stateful methods")
    command = " ".join([".venv/bin/python", "benchmarks/run_benchmarks.py"] + [shlex.quote(a) for a in argv])
    out_md = Path(args.out) if args.out else HERE / "results" / (
        "latency-quick.md" if args.quick else "latency.md")
    # Event time advances one second per file, i.e. at the pace of the wall clock.
    cfg = Config(f"latency/{_k(args.latency_keys) if args.latency_keys >= 1000 else args.latency_keys}",
                 "1 s trigger", args.rate, args.duration, args.latency_keys, seed=31)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="kw-latency-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    spark = build_session(args.driver_memory, args.changelog_checkpointing, jar=args.jar, conf=args.conf)
    per_method: Dict[str, List[Dict[str, object]]] = {m: [] for m in methods}
    try:
        staging = work / "latency-data"
        info = generate(cfg, staging, span_us=1_000_000, set_mtimes=False)
        files = sorted(staging.glob("batch-*.parquet"))
        log(f"{cfg.name}: generated {len(files)} files x {cfg.rows_per_batch:,} rows")
        for i in range(args.runs):  # round-robin, so machine noise hits the methods alike
            for m in methods:
                run = latency.latency_run(spark, SCHEMA, lambda ev, m=m: result_frame(m, ev),
                                          files, work, m)
                t = run["emitted"]
                close = np.zeros(0, np.int64)
                if t is not None:
                    dev = np.array([int(d.rsplit("-", 1)[1]) for d in t.column("device").to_pylist()],
                                   np.int64)
                    start = t.column("start").to_numpy().astype(np.int64)
                    close = closing_file(m, info["rows"], cfg.keys, dev, start)
                summary = latency.summarise(run, close, args.latency_warmup, cfg.total_rows)
                per_method[m].append({"summary": summary, "run": run, "close": close})
                log(f"{cfg.name} {m}: run {i + 1}: {summary}")
                if summary["rows_read"] != cfg.total_rows:
                    raise RuntimeError(f"{m}: read {summary['rows_read']} rows, fed {cfg.total_rows}")
                if summary.get("negative"):
                    raise RuntimeError(f"{m}: {summary['negative']} windows out before their "
                                       "closing rows arrived")
    finally:
        jvm_version, spark_version = close_session(spark, work, keep_work=bool(args.work_dir))
    elapsed = time.time() - started
    lines = [
        "# keyed-watermarks latency at a 1-second trigger", "",
        f"Command: `{command}`", "",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; total time "
        f"{elapsed / 60:.1f} min",
        f"- Machine: {os.cpu_count()} CPUs, {platform.platform()}, Java {jvm_version}, Spark "
        f"{spark_version}, load average at the end {', '.join(f'{x:.1f}' for x in os.getloadavg())}",
        f"- Input: {args.rate:,} rows/s as one parquet file per second for {args.duration} s "
        f"({cfg.total_rows:,} rows), {cfg.keys:,} devices, event time advancing 1 s per file, "
        f"{DELAYED_FRACTION:.0%} of rows delayed (exponential, mean {MEAN_DELAY_US / 1e6:g} s, cap "
        f"{MAX_DELAY_US / 1e6:g} s); window {WINDOW}, lateness {LATENESS}",
        f"- Spark: local[2], 2 shuffle partitions, RocksDB state store, "
        f"trigger(processingTime='1 second'), no maxFilesPerTrigger, foreachBatch sink recording "
        f"the emitted windows; {args.runs} run(s) per method, round-robin; the first "
        f"{args.latency_warmup:g} s of each run left out", "",
        "| method | runs | batches | batch ms p50 / p95 / max | windows out (timed) "
        "| input-to-output ms p50 / p95 / max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    raw = {}
    for m in methods:
        runs = per_method[m]
        dur, lat = [], []
        for r in runs:
            arrival = np.array(r["run"]["arrival_ms"], np.float64)
            cutoff = arrival[0] + args.latency_warmup * 1000.0
            dur += [b["ms"] for b in r["run"]["batches"] if b["start_ms"] >= cutoff]
            t = r["run"]["emitted"]
            if t is not None:
                by_id = {b["id"]: b for b in r["run"]["batches"]}
                close = r["close"]
                for b, f in zip(t.column("batch_id").to_pylist(), close.tolist()):
                    if f >= 0 and arrival[f] >= cutoff:
                        lat.append(by_id[b]["end_ms"] - arrival[f])
        d, la = np.array(dur, np.float64), np.array(lat, np.float64)

        def three(x: np.ndarray) -> str:
            if not len(x):
                return "–"
            return " / ".join(f"{float(np.percentile(x, q, method='inverted_cdf')):,.0f}" for q in (50, 95, 100))
        windows = sum(r["summary"]["windows"] for r in runs)
        lines.append(f"| {m} | {len(runs)} | {len(d)} | {three(d)} | {windows:,} ({len(la):,}) "
                     f"| {three(la)} |")
        raw[m] = [r["summary"] for r in runs]
    lines += ["", "Batch ms: `durationMs.triggerExecution` of every micro-batch (no-data batches "
              "included); input-to-output ms, per emitted window: end of the batch that emitted "
              "it (progress timestamp + triggerExecution) - wall time at which the file whose "
              "rows move the method's watermark to or past the window's end appeared in the "
              "input directory (ours: the key's watermark; native: Spark's global one). Pooled "
              "over the runs.", ""]
    report = "\n".join(lines) + "\n"
    print(report)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text(report)
    out_md.with_suffix(".json").write_text(json.dumps({"command": command, "results": raw}, indent=1))
    log(f"wrote {out_md} ({elapsed / 60:.1f} min)")
    return 0


# ----------------------------------------------------------------------------- main


def parse_args(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny smoke test (< 2 min)")
    p.add_argument("--with-1m-keys", action="store_true", help="add the 1M-key configurations (slow)")
    p.add_argument("--runs", type=int, default=3, help="timed runs per method and configuration")
    p.add_argument("--slow-seconds", type=float, default=45.0,
                   help="a method whose warm-up run takes longer than this gets one timed run")
    p.add_argument("--methods", default=None,
                   help="comma-separated subset of " + ",".join(METHODS) + " (default: all; "
                        "with --latency: native,keyed)")
    p.add_argument("--configs", default="", help="comma-separated config names, e.g. 'small/1k keys'")
    p.add_argument("--small-rows", type=int, default=10_000, help="rows per micro-batch, small batches")
    p.add_argument("--small-batches", type=int, default=20)
    p.add_argument("--large-rows", type=int, default=1_000_000, help="rows per micro-batch, large batches")
    p.add_argument("--large-batches", type=int, default=4)
    p.add_argument("--python-max-keys", type=int, default=1_000,
                   help="run the pure-Python competitor only on configurations with at most this "
                        "many keys (it takes minutes per run at 100k keys)")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--changelog-checkpointing", action="store_true",
                   help="enable RocksDB changelog checkpointing (Spark's default, off, otherwise)")
    p.add_argument("--work-dir", default=None, help="data and checkpoints (default: a temp dir, removed)")
    p.add_argument("--no-check", action="store_true", help="skip the competitor-vs-ours output check")
    p.add_argument("--no-emission-delay", action="store_true",
                   help="skip the extra (untimed) run per stateful method that records which "
                        "micro-batch emits each window (emission-delay columns)")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="record the timed runs of each (configuration, method) with Java Flight "
                        "Recorder (driver JVM, settings=profile) into DIR/<config>__<method>.jfr; "
                        "timed runs then go method by method instead of round-robin. Summarise "
                        "with benchmarks/jfr_summary.py")
    p.add_argument("--keyed-options", default=None, metavar="JSON",
                   help="more keyword arguments of kw.keyed_watermark for the keyed method, e.g. "
                        "'{\"max_skew\": \"unbounded\"}' (A/B a policy against the defaults)")
    p.add_argument("--jar", default=None,
                   help="use this keyed-watermarks jar instead of the bundled one (A/B a core "
                        "change without reinstalling)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra Spark setting for the benchmark session (repeatable), e.g. to A/B "
                        "a Spark option; applies to every method")
    p.add_argument("--spark", default=None, metavar="MINOR",
                   help="run on this Spark line (4.0, 4.1, 4.2, 4.3) with its venv (dev/venv) "
                        "and its keyed-watermarks jar; results default to results/spark-MINOR.md")
    p.add_argument("--flink-max-keys", type=int, default=1_000,
                   help="--with-flink: run Flink only on configurations with at most this many keys (at "
                        "100k keys a Flink run took over 10 minutes here)")
    p.add_argument("--with-flink", action="store_true",
                   help="add the Apache Flink reference row per configuration (Flink SQL TUMBLE "
                        "in build/flink-venv; set it up with benchmarks/flink_setup)")
    p.add_argument("--latency", action="store_true",
                   help="latency mode instead of throughput: one parquet file per second into "
                        "the input directory, trigger(processingTime='1 second'); p50/p95 batch "
                        "duration and input-to-output latency (results/latency.md)")
    p.add_argument("--rate", type=int, default=10_000,
                   help="--latency: rows per second (one file per second)")
    p.add_argument("--duration", type=int, default=90, help="--latency: seconds of input per run")
    p.add_argument("--latency-keys", type=int, default=1_000, help="--latency: devices")
    p.add_argument("--latency-warmup", type=float, default=15.0,
                   help="--latency: leave out the batches and windows of the first S seconds")
    p.add_argument("--out", default=None, help="markdown output (default results/latest.md, "
                                               "results/spark-MINOR.md with --spark, "
                                               "results/quick.md with --quick)")
    args = p.parse_args(argv)
    if args.methods is None:
        args.methods = "native,keyed" if args.latency else ",".join(METHODS)
    if args.quick:
        args.runs = 1
        if args.latency:
            args.rate, args.duration, args.latency_keys, args.latency_warmup = 500, 30, 100, 5.0
    return args


def build_session(driver_memory: str, changelog: bool, profile: bool = False,
                  jar: Optional[str] = None, conf: Sequence[str] = ()) -> SparkSession:
    # Python workers (the competitor) must run this interpreter (pandas, numpy, pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # pyspark 4.3 warns about pandas >= 3 in every worker; keep the log readable.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("keyed-watermarks-benchmarks")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                "true" if changelog else "false")
    )
    for kv in conf:  # --conf: A/B of a Spark setting, for every method alike
        key, eq, value = kv.partition("=")
        if not eq or not key.strip():
            raise SystemExit(f"--conf {kv!r}: expected KEY=VALUE, e.g. spark.sql.shuffle.partitions=4")
        builder = builder.config(key.strip(), value.strip())
    if profile:  # deep stacks: Spark's task stacks exceed JFR's default depth of 64
        builder = builder.config("spark.driver.extraJavaOptions",
                                 "-XX:FlightRecorderOptions:stackdepth=1024")
    if jar:
        import keyed_watermarks._jvm as kwjvm
        kwjvm.jar_path = lambda: str(Path(jar).resolve())
    spark = kw.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # The competitor's function is pickled by reference: ship its module to the Python workers.
    spark.sparkContext.addPyFile(str(HERE / "python_keyed.py"))
    # transformWithStateInPandas also unpickles the processor in a driver-side Python worker
    # (to read its state schemas), which does not see addPyFile's files: pickle it by value.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules["python_tws"])
    return spark


def close_session(spark: SparkSession, work: Path, keep_work: bool):
    """Stops the session (after reading the Java and Spark versions for the report) and removes
    the work directory unless the user chose it. Returns (Java version, Spark version)."""
    versions = (spark.sparkContext._jvm.System.getProperty("java.version"), spark.version)
    spark.stop()
    if not keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return versions


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"unknown method {m!r}; choose from {METHODS}")
    if args.latency:
        return main_latency(args, methods, argv)
    if args.with_flink and not FLINK_PYTHON.exists():
        raise SystemExit("--with-flink: build/flink-venv is missing; run benchmarks/flink_setup")
    flink_rows: List[Dict[str, object]] = []
    delayed: Optional[Dict[str, object]] = None
    configs = configurations(args)
    if not configs:
        raise SystemExit("no configuration selected")
    default_out = "quick.md" if args.quick else f"spark-{args.spark}.md" if args.spark else "latest.md"
    out_md = Path(args.out) if args.out else HERE / "results" / default_out
    command = " ".join([".venv/bin/python", "benchmarks/run_benchmarks.py"] + [shlex.quote(a) for a in argv])

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="kw-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    spark = build_session(args.driver_memory, args.changelog_checkpointing,
                          profile=bool(args.profile), jar=args.jar, conf=args.conf)
    check_note = None
    skipped: List[str] = []
    results: List[Result] = []
    try:
        for ci, cfg in enumerate(configs):
            input_dir = work / f"data-{ci}"
            t = time.perf_counter()
            info = generate(cfg, input_dir)
            log(f"{cfg.name}: generated {cfg.batches} x {cfg.rows_per_batch:,} rows, "
                f"{info['keys_seen']:,} keys seen, in {time.perf_counter() - t:.1f}s")
            competitors = [m for m in PYTHON_METHODS if m in methods]
            if ci == 0 and not args.no_check and competitors \
                    and cfg.total_rows <= 300_000 and cfg.keys <= args.python_max_keys:
                check_note = check_competitors(spark, input_dir, work, competitors)
                log(check_note)
            per_method: Dict[str, Result] = {}
            cfg_methods = [m for m in methods
                           if not (m in PYTHON_METHODS and cfg.keys > args.python_max_keys)]
            if len(cfg_methods) < len(methods):
                skipped.append(cfg.name)
            # Warm-up: one full run per method (JIT, Python workers), reported separately.
            for m in cfg_methods:
                w = run_once(spark, m, input_dir, work)
                if w.input_rows != cfg.total_rows:
                    raise RuntimeError(f"{m}: read {w.input_rows} rows, expected {cfg.total_rows}")
                if w.late_rows is not None and w.late_rows != info["late_keyed"]:
                    raise RuntimeError(f"{m}: dropped {w.late_rows} late rows, the data says "
                                       f"{info['late_keyed']} (keyed_late_rows)")
                open_windows = {"native": info["open_native"], "keyed": info["open_keyed"],
                                "python": info["open_keyed"],
                                "python_tws": info["open_keyed"]}.get(m)
                per_method[m] = Result(cfg.name, m, cfg.total_rows, w, [], open_windows)
                log(f"{cfg.name} {m}: warm-up {w.wall_s:.2f}s")
            # Timed runs, round-robin over the methods so machine noise hits them alike (with
            # --profile: method by method, one flight recording per method).
            order = [(i, m) for i in range(args.runs) for m in cfg_methods]
            if args.profile:
                order.sort(key=lambda im: cfg_methods.index(im[1]))
            recording = None
            for i, m in order:
                r = per_method[m]
                if i > 0 and r.warmup.wall_s > args.slow_seconds:
                    continue
                if args.profile and recording is None:
                    recording = start_recording(spark, Path(args.profile), cfg.name, m)
                run = run_once(spark, m, input_dir, work)
                r.runs.append(run)
                log(f"{cfg.name} {m}: run {i + 1}: {run.wall_s:.2f}s")
                if recording is not None and (i, m) == [x for x in order if x[1] == m][-1]:
                    log(f"{cfg.name} {m}: flight recording {stop_recording(recording)}")
                    recording = None
            if not args.no_emission_delay:
                for m in cfg_methods:
                    if m == "stateless":
                        continue
                    r = per_method[m]
                    emitted = emission_run(spark, m, input_dir, work)
                    timed = sorted(r.runs, key=lambda x: x.wall_s)[(len(r.runs) - 1) // 2]
                    r.emission = emission_delay(m, emitted, info["rows"], cfg.keys, timed)
                    log(f"{cfg.name} {m}: emission delay {r.emission}")
            results.extend(per_method[m] for m in cfg_methods)
            if args.with_flink and cfg.keys <= args.flink_max_keys:
                f = run_flink(input_dir, args.runs, work, str(ci))
                flink_rows.append({"config": cfg.name, "total_rows": cfg.total_rows,
                                   "late_keyed": info["late_keyed"], "flink": f})
                log(f"{cfg.name} flink: {f}")
            shutil.rmtree(input_dir, ignore_errors=True)
        if args.with_flink:
            delayed = delayed_devices_accuracy(spark, work, args.quick)
            log(f"delayed-devices accuracy: {delayed}")
    finally:
        jvm_version, spark_version = close_session(spark, work, keep_work=bool(args.work_dir))

    elapsed = time.time() - started
    header = [
        "# keyed-watermarks end-to-end benchmark",
        "",
        f"Command: `{command}`",
        "",
        f"- Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}; "
        f"total time {elapsed / 60:.1f} min",
        f"- Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}, "
        f"Java {jvm_version}, Spark {spark_version}, load average at the end "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}",
        f"- Spark: local[2], spark.sql.shuffle.partitions=2, AQE off, driver memory "
        f"{args.driver_memory}, RocksDB state store (set by kw.configure) for every stateful "
        f"method, changelog checkpointing {'on' if args.changelog_checkpointing else 'off (default)'}, "
        "Trigger.AvailableNow, maxFilesPerTrigger=1, sink `noop`",
        f"- Query: window {WINDOW}, lateness {LATENESS}, aggregates count(*), avg(temp); "
        f"every micro-batch covers {BATCH_SPAN_US / 1e6:g} s of event time; "
        f"{DELAYED_FRACTION:.0%} of rows delayed (exponential, mean {MEAN_DELAY_US / 1e6:g} s, "
        f"cap {MAX_DELAY_US / 1e6:g} s)",
        f"- Per configuration and method: one warm-up run (reported, not in the median), then "
        f"{args.runs} timed runs round-robin over the methods (1 if the warm-up took more than "
        f"{args.slow_seconds:g} s); every run starts from an empty checkpoint",
        "",
    ]
    notes = [
        "Columns: *rows/s* = rows / median wall time (query start to termination); *vs native* = "
        "native median / this median (higher is faster); *JVM CPU s* = median CPU time (user + "
        "system, from /proc) of the driver JVM during a run, which in local mode runs the tasks "
        "too (Python workers not included), less sensitive than wall time to other load on a "
        "shared machine; *peak heap* = max driver-JVM used heap "
        "sampled every 0.1 s (Python workers not included); *state rows* = "
        "`numRowsTotal` summed over the state operators of the last batch with state (native: one "
        "row per open (key, window); ours and python: one per key, holding its open windows; "
        "python_tws: one value row per key plus one map row per open (key, window)); "
        "*RocksDB mem* = their `memoryUsedBytes` (RocksDB's memory estimate: "
        "memtables and caches, mostly fixed, not the state's size); *state SST* = custom metric "
        "`rocksdbSstFileSize`, the live (compressed) RocksDB files after the last commit, i.e. "
        "the state's size on disk (0 or – when nothing was flushed yet, e.g. with changelog "
        "checkpointing); *open (key, window)* = windows still in state at the end, computed from "
        "the data under each method's semantics (python keeps them inside one JSON value per "
        "key); *SST B / open window* = state SST / open (key, window), per-key rows included; "
        "*windows out* = sum of `sink.numOutputRows` (noop sink); *emit delay* (from one extra, "
        "untimed run per method whose foreachBatch sink records which micro-batch emits each "
        "window): per emitted window, micro-batches between the batch whose rows move the "
        "method's watermark to or past the window's end (ours and Python: the key's watermark; "
        "native: Spark's global one) and the batch that emits it; *emit delay ms* = end of the "
        "emitting batch - end of that closing batch, *closing batch → out ms* = end of the "
        "emitting batch - start of the closing batch (both with the batch times of the median "
        "timed run, whose batch ids are the same).",
    ]
    if check_note:
        notes += ["", f"Check: {check_note} (first configuration, before timing)."]
    if skipped:
        notes += ["", f"Not run: {', '.join(m for m in PYTHON_METHODS if m in methods)} for "
                  f"{', '.join(skipped)} (more than "
                  f"{args.python_max_keys:,} keys: one group call per key and batch makes it "
                  "minutes per run; include it with --python-max-keys)."]
    native_median = {r.config: r.median for r in results if r.method == "native"}
    report = markdown(results, header, notes + flink_markdown(flink_rows, native_median)
                      + delayed_devices_markdown(delayed))
    print(report)
    out_md.parent.mkdir(parents=True, exist_ok=True)
    out_md.write_text(report)
    raw = [{"config": r.config, "method": r.method, "total_rows": r.total_rows,
            "open_windows": r.open_windows, "emission": r.emission, "warmup": asdict(r.warmup),
            "runs": [asdict(x) for x in r.runs]} for r in results]
    out_md.with_suffix(".json").write_text(
        json.dumps({"command": command, "results": raw, "flink": flink_rows,
                    "delayed_devices": delayed}, indent=1))
    log(f"wrote {out_md} and {out_md.with_suffix('.json')} ({elapsed / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
