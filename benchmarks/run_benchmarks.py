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
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Dict, List, Optional

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

sys.path.insert(0, str(HERE))


from harness import methods as methods_mod  # noqa: E402
from harness.competitors import check_competitors  # noqa: E402
from harness.data import (BATCH_SPAN_US, DELAYED_FRACTION, LATENESS, MAX_DELAY_US,  # noqa: E402
                          MEAN_DELAY_US, WINDOW, configurations, generate)
from harness.emission import emission_delay, emission_run  # noqa: E402
from harness.flink import (FLINK_PYTHON, delayed_devices_accuracy,  # noqa: E402
                           delayed_devices_markdown, flink_markdown, run_flink)
from harness.latency_mode import main_latency  # noqa: E402
from harness.floor import BUILD_HINT, floor_jar  # noqa: E402
from harness.methods import METHODS, PYTHON_METHODS, WINDOWLESS_METHODS  # noqa: E402
from harness.profiling import start_recording, stop_recording  # noqa: E402
from harness.report import Result, markdown  # noqa: E402
from harness.session import build_session, close_session, log  # noqa: E402
from harness.timing import run_once  # noqa: E402


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
    p.add_argument("--keyed-window-options", default=None, metavar="JSON",
                   help="more keyword arguments of .window(...) for the keyed method, e.g. "
                        "'{\"emit\": \"every_batch\"}' (early panes; with --output-mode update)")
    p.add_argument("--output-mode", default="append", choices=["append", "update"],
                   help="output mode of the native and keyed methods (update: Spark's update mode "
                        "against keyed early panes)")
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
        # tws_floor by default only when its jar is built (./dev/sbt jmh/package)
        args.methods = "native,keyed" if args.latency else ",".join(
            m for m in METHODS if m != "tws_floor" or floor_jar() is not None)
    if args.quick:
        args.runs = 1
        if args.latency:
            args.rate, args.duration, args.latency_keys, args.latency_warmup = 500, 30, 100, 5.0
    return args



def main(argv: List[str]) -> int:
    args = parse_args(argv)
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"unknown method {m!r}; choose from {METHODS}")
    if "tws_floor" in methods and floor_jar() is None:
        raise SystemExit(f"tws_floor: no benchmarks/jmh jar; {BUILD_HINT}")
    if args.keyed_options:  # more keyword arguments of kw.keyed_watermark for the keyed method
        methods_mod.KEYED_OPTIONS.update(json.loads(args.keyed_options))
    if args.keyed_window_options:  # more keyword arguments of .window(...) for the keyed method
        methods_mod.KEYED_WINDOW_OPTIONS.update(json.loads(args.keyed_window_options))
    methods_mod.OUTPUT_MODE = args.output_mode
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
                          profile=bool(args.profile), jar=args.jar, conf=args.conf,
                          extra_jars=[str(floor_jar())] if "tws_floor" in methods else [])
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
            # A method whose warm-up took longer than --slow-seconds gets one timed run.
            order = [(i, m) for i in range(args.runs) for m in cfg_methods
                     if i == 0 or per_method[m].warmup.wall_s <= args.slow_seconds]
            if args.profile:
                order.sort(key=lambda im: cfg_methods.index(im[1]))
            recording = None
            for i, m in order:
                r = per_method[m]
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
                    if m in WINDOWLESS_METHODS:
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
    try:  # the commit measured, in the title with the date (a result page names its code)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown commit"
    header = [
        f"# End-to-end benchmark {out_md.stem}: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}, `{commit}`",
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
