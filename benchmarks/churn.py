#!/usr/bin/env python3
"""State under device churn: keyed watermarks (defaults and each policy) next to Spark's native
watermark aggregation, on the same generated stream.

    .venv/bin/python benchmarks/churn.py                   # 5,000 new devices a batch, 20 batches
    .venv/bin/python benchmarks/churn.py --million         # adds 1M distinct devices (50,000 a batch)
    .venv/bin/python benchmarks/churn.py --configs native,defaults --keys-per-batch 500   # quick

The stream: micro-batch ``b`` covers event time ``[b * span, (b + 1) * span)`` (span = window =
10 minutes) and brings ``keys_per_batch`` devices never seen before; each sends two rows in its
first window and, with probability 1/2, two more in the next, then is silent forever. Lateness
30 seconds. Every configuration reads the same parquet files (one per micro-batch, local[2],
2 shuffle partitions). Per micro-batch it records Spark's own state-operator metrics: rows in
state (``numRowsTotal``: for ours one row per key, plus a sketch row per key with adaptive
lateness and one per (key, source) with min of inputs), rows removed, and the RocksDB SST
bytes on disk; after the run, the state read with Spark's state data source. Processing-time
policies (``idle_timeout``) run with a 1-second processing-time trigger and are read after
the 20th data micro-batch and again once their keys had time to go idle (wall clock).

This measures state, not speed: the numbers do not depend on the machine's load, except the
processing-time rows (how many batches a wall-clock timeout spans). Results: a markdown table
on stdout and in benchmarks/results/churn.md (raw numbers in churn.json).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession, functions as F

import keyed_watermarks as kw

HERE = Path(__file__).resolve().parent
SPAN_US = 10 * 60 * 1_000_000  # event time per micro-batch = window size
WINDOW, LATENESS = "10 minutes", "30 seconds"
T0_US = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, lat STRING, src STRING"
IDLE = "10 seconds"


def generate(directory: Path, keys_per_batch: int, batches: int, seed: int = 7) -> int:
    """Writes one parquet file per micro-batch; returns the number of distinct keys."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    second_window = [rng.random(keys_per_batch) < 0.5 for _ in range(batches)]
    for b in range(batches):
        parts = []
        for origin in (b, b - 1):  # new keys, and last batch's keys active for a second window
            if origin < 0:
                continue
            ids = np.arange(keys_per_batch) if origin == b else np.flatnonzero(second_window[origin])
            n = len(ids) * 2
            names = np.char.add(f"d{origin:04d}-", np.repeat(ids, 2).astype(str))
            ts = T0_US + b * SPAN_US + rng.integers(0, SPAN_US, n)
            lat = np.where(np.repeat(ids, 2) % 2 == 0, "30 seconds", "2 minutes")
            src = np.where(rng.random(n) < 0.5, "a", "b")
            parts.append(pa.table({
                "device": pa.array(names.tolist(), pa.string()),
                "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
                "temp": pa.array(rng.integers(0, 40, n).astype(np.float64)),
                "lat": pa.array(lat.tolist(), pa.string()),
                "src": pa.array(src.tolist(), pa.string()),
            }))
        path = directory / f"batch-{b:05d}.parquet"
        pq.write_table(pa.concat_tables(parts), path)
        os.utime(path, (1_000_000 + b, 1_000_000 + b))
    return keys_per_batch * batches


def keyed(events: DataFrame, **options) -> DataFrame:
    return (kw.keyed_watermark(events, key="device", event_time="ts", lateness=LATENESS, **options)
            .window(WINDOW).agg(F.count("*").alias("n")))


def native(events: DataFrame) -> DataFrame:
    return events.withWatermark("ts", LATENESS).groupBy("device", F.window("ts", WINDOW)).agg(F.count("*").alias("n"))


# name -> (title, options of keyed_watermark (a function: Columns need an active session) or
# None for Spark's native aggregation, whether it is a processing-time policy)
CONFIGS: Dict[str, tuple] = {
    "native": ("Spark native `withWatermark` + `groupBy(device, window)`", None, False),
    "defaults": ("keyed, defaults (`max_skew` 1 hour)", lambda: {}, False),
    "unbounded": ('keyed, `max_skew="unbounded"` (the defaults before this change)',
                  lambda: {"max_skew": "unbounded"}, False),
    "max_skew": ('keyed, `max_skew="10 minutes"`', lambda: {"max_skew": "10 minutes"}, False),
    "key_lateness": ("keyed, `key_lateness` column (30 s / 2 min)", lambda: {"key_lateness": F.col("lat")}, False),
    "adaptive": ("keyed, `adaptive_lateness`",
                 lambda: {"adaptive_lateness": kw.AdaptiveLateness(0.9, max="5 minutes")}, False),
    "sources": ('keyed, min of inputs (`source="src"`)', lambda: {"source": "src"}, False),
    "closing_global": ('keyed, `closing="global"`', lambda: {"closing": "global"}, False),
    "idle_timeout": (f'keyed, `idle_timeout="{IDLE}"` (processing time)',
                     lambda: {"idle_timeout": IDLE, "idle_clock": "processing_time"}, True),
    "advance_when_idle": (f'keyed, `idle_timeout="{IDLE}", advance_when_idle=True` (processing time)',
                          lambda: {"idle_timeout": IDLE, "advance_when_idle": True, "idle_clock": "processing_time"},
                          True),
}


def run_config(spark: SparkSession, name: str, data: Path, work: Path, batches: int) -> dict:
    title, options, processing_time = CONFIGS[name]
    checkpoint = work / f"checkpoint-{name}"
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(data))
    df = native(events) if options is None else keyed(events, **options())
    writer = df.writeStream.format("noop").outputMode("append").option("checkpointLocation", str(checkpoint))
    started = time.time()
    if not processing_time:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
        after_data = None
    else:
        query = writer.trigger(processingTime="1 second").start()
        while sum(1 for p in query.recentProgress if p.numInputRows > 0) < batches:
            if query.exception():
                raise query.exception()
            time.sleep(0.5)
        after_data = query.recentProgress[-1].stateOperators[0].numRowsTotal
        time.sleep(2 * 2 * 10 + 5)  # twice the idle timeout (forgetting), twice over
        query.stop()
    if query.exception():
        raise query.exception()
    progress = [p for p in query.recentProgress]
    per_batch = [(p.batchId, p.numInputRows, p.stateOperators[0].numRowsTotal, p.stateOperators[0].numRowsRemoved,
                  p.stateOperators[0].customMetrics.get("rocksdbSstFileSize")) for p in progress]
    data_batches = [b for b in per_batch if b[1] > 0]
    twentieth = data_batches[batches - 1] if len(data_batches) >= batches else data_batches[-1]
    state_var = {} if name == "native" else {"stateVarName": "key_state"}
    reader = spark.read.format("statestore").option("path", str(checkpoint))
    for k, v in state_var.items():
        reader = reader.option(k, v)
    state = reader.load()
    windows = sum(p.observedMetrics["keyed_watermarks_output"]["windows_emitted"]
                  for p in progress if "keyed_watermarks_output" in p.observedMetrics)
    return {
        "name": name, "title": title,
        "rows_after_data": twentieth[2] if after_data is None else after_data,
        "rows_at_end": per_batch[-1][2],
        "rows_removed": sum(b[3] for b in per_batch),
        "sst_bytes_at_end": per_batch[-1][4],
        "state_rows_read": state.count(),
        "windows_emitted": windows if name != "native" else None,
        "micro_batches": len(per_batch),
        "seconds": round(time.time() - started, 1),
        "per_batch": per_batch,
    }


def table(results: List[dict], keys: int, batches: int, keys_per_batch: int) -> str:
    lines = [
        f"Churn: {keys_per_batch:,} new devices per micro-batch, each active in 1 or 2 windows of {WINDOW} "
        f"(one micro-batch of event time each), then silent; {batches} micro-batches, {keys:,} devices; "
        f"lateness {LATENESS}; local[2], 2 shuffle partitions.",
        "",
        "| configuration | state rows after the last data batch | at the end | rows removed | windows emitted "
        "| RocksDB SST bytes at the end | keys (rows) read back with the state data source | micro-batches |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r['title']} | {r['rows_after_data']:,} | {r['rows_at_end']:,} | {r['rows_removed']:,} | "
            f"{'–' if r['windows_emitted'] is None else format(r['windows_emitted'], ',')} | "
            f"{'–' if r['sst_bytes_at_end'] is None else format(r['sst_bytes_at_end'], ',')} | "
            f"{r['state_rows_read']:,} | {r['micro_batches']} |")
    lines += ["", "State rows after each micro-batch (`numRowsTotal`; data batches first, then no-data batches):", ""]
    for r in results:
        lines.append(f"- {r['name']}: " + " ".join(str(b[2]) for b in r["per_batch"]))
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys-per-batch", type=int, default=5000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--million", action="store_true",
                        help="also 1M distinct devices (50,000 a batch) for native, defaults and unbounded")
    parser.add_argument("--out", default=str(HERE / "results" / "churn.md"))
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("--render-only", action="store_true", help="re-render --out from its .json")
    args = parser.parse_args(argv)
    if args.render_only:
        saved = json.loads(Path(args.out).with_suffix(".json").read_text())
        text = "\n\n".join(Path(args.out).read_text().split("\n\n")[:2]) + "\n\n" + "\n".join(
            table(run["results"], run["keys_per_batch"] * args.batches, args.batches, run["keys_per_batch"])
            for run in saved)
        Path(args.out).write_text(text)
        print(text)
        return
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="kw-churn-"))
    spark = kw.configure(SparkSession.builder.master("local[2]").appName("churn")
                         .config("spark.sql.shuffle.partitions", "2")
                         .config("spark.ui.enabled", "false")
                         .config("spark.sql.session.timeZone", "UTC")
                         .config("spark.driver.memory", "4g")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sections = []
    runs = [(args.keys_per_batch, args.configs.split(","))]
    if args.million:
        runs.append((1_000_000 // args.batches, ["native", "defaults", "unbounded"]))
    all_results = []
    for keys_per_batch, names in runs:
        data = work / f"data-{keys_per_batch}"
        shutil.rmtree(data, ignore_errors=True)
        keys = generate(data, keys_per_batch, args.batches)
        results = []
        for name in names:
            print(f"{keys_per_batch} keys/batch: {name} ...", flush=True)
            results.append(run_config(spark, name, data, work / f"run-{keys_per_batch}", args.batches))
            print(f"  {results[-1]['rows_after_data']:,} rows after the data, {results[-1]['seconds']} s", flush=True)
        sections.append(table(results, keys, args.batches, keys_per_batch))
        all_results.append({"keys_per_batch": keys_per_batch, "results": results})
    header = (f"# State under device churn\n\n`.venv/bin/python benchmarks/churn.py {' '.join(argv or sys.argv[1:])}`"
              f" ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}). See the script's docstring.\n\n")
    text = header + "\n".join(sections)
    print(text)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(all_results, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
