"""--latency: the same files fed at one per second to each method in turn (latency.py)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

import latency
from harness.data import (DELAYED_FRACTION, LATENESS, MAX_DELAY_US, MEAN_DELAY_US, SCHEMA,
                          WINDOW, Config, _k, generate)
from harness.emission import closing_file
from harness.methods import WINDOWLESS_METHODS, result_frame
from harness.session import build_session, close_session, log

HERE = Path(__file__).resolve().parent.parent


def main_latency(args: argparse.Namespace, methods: List[str], argv: List[str]) -> int:
    """--latency: the same files fed at one per second to each method in turn (latency.py)."""
    if any(m in WINDOWLESS_METHODS for m in methods):
        raise SystemExit("--latency: 'stateless' and 'tws_floor' emit no windows; choose windowed methods")
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
