"""Paired A/B of two (or more) checkouts, as a user would try them (issue 28's regression).

Each checkout runs with its OWN Python package (``CHECKOUT/python``) and the jar in its
``python/keyed_watermarks/jars`` (build it there first), so an old commit's Python API pairs
with its own jar. The checkouts alternate (A, B, A, B, ...), one child process each; a child
runs one warm-up of each method, then ``--runs`` timed runs round-robin over the methods and
prints the medians of wall time and of the driver JVM's CPU time (user + system, from /proc),
so the keyed / native ratio is taken inside one process.

Only the public API that every checkout since the first release has: ``kw.configure`` and
``kw.keyed_watermark(...).window(...).agg(...)``.

The workload (issue 28): 1,000 devices, 1.5M events in 12 parquet files of 125k rows (one
micro-batch each, ``maxFilesPerTrigger=1``), 30 s of event time per file (6 minutes in all),
20% of the rows delayed by an exponential delay (mean 1 s, capped at 8 s); ``count`` + ``avg``
over 60 s tumbling windows, lateness 10 s, ``local[2]``, 2 shuffle partitions, AQE off,
RocksDB, default options, ``availableNow``, ``noop`` sink.

    .venv/bin/python benchmarks/ab_checkouts.py --pairs 2 OLD_CHECKOUT NEW_CHECKOUT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"
T0_US = 1_735_689_600_000_000


def generate(input_dir: Path, keys: int, rows: int, batches: int, span_us: int, seed: int = 28):
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    input_dir.mkdir(parents=True, exist_ok=True)
    names = np.array([f"device-{i:07d}" for i in range(keys)], dtype=object)
    for b in range(batches):
        i = np.arange(b * rows, (b + 1) * rows, dtype=np.int64)
        dev = rng.integers(0, keys, rows)
        ts = T0_US + (i * span_us) // rows
        delay = np.minimum(rng.exponential(1_000_000, rows), 8_000_000).astype(np.int64)
        ts = ts - np.where(rng.random(rows) < 0.2, delay, 0)
        temp = 20.0 + 5.0 * np.sin(dev / 7.0) + rng.normal(0.0, 0.5, rows)
        path = input_dir / f"batch-{b:05d}.parquet"
        pq.write_table(pa.table({
            "device": pa.array(names[dev], pa.string()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "temp": pa.array(temp, pa.float64()),
        }), path)
        os.utime(path, (1_000_000 + b, 1_000_000 + b))


def workload_query(kw, method: str, ev, options: dict):
    """The workload's query over `ev`: Spark's streaming aggregation ("native") or ours ("keyed",
    with these keyword arguments of kw.keyed_watermark); count + avg over 60 s windows, lateness
    10 s."""
    from pyspark.sql import functions as F

    aggs = [F.count("*").alias("n"), F.avg("temp").alias("avg_temp")]
    if method == "native":
        return ev.withWatermark("ts", "10 seconds").groupBy("device", F.window("ts", "60 seconds")).agg(*aggs)
    if method == "keyed":
        return kw.keyed_watermark(ev, key="device", event_time="ts", lateness="10 seconds",
                                  **options).window("60 seconds").agg(*aggs)
    raise ValueError(method)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child(args: argparse.Namespace) -> None:
    """One process: warm-up + timed runs of each method; prints one JSON line."""
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark.sql import SparkSession

    import keyed_watermarks as kw

    builder = (SparkSession.builder.master("local[2]").appName("ab-checkouts")
               .config("spark.driver.memory", "4g")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for kv in args.conf:
        key, _, value = kv.partition("=")
        builder = builder.config(key, value)
    spark = kw.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm
    pid = jvm.ProcessHandle.current().pid()
    options = json.loads(args.keyed_options or "{}")

    # In-process variants (--variant): a method run with its own kw.keyed_watermark options
    # and/or session confs, timed round-robin with the others in the same JVM, so a lever's
    # A/B does not carry the spread between processes (JIT, heap layout) of a checkout A/B.
    variants = {v["name"]: v for v in map(json.loads, args.variant)}

    def query(method: str, ev):
        if method in variants:
            v = variants[method]
            return workload_query(kw, v["method"], ev, {**options, **v.get("options", {})})
        return workload_query(kw, method, ev, options)

    work = Path(tempfile.mkdtemp(prefix="ab-ckpt-"))

    def run(method: str):
        confs = variants.get(method, {}).get("conf", {})
        saved = {k: spark.conf.get(k, None) for k in confs}
        for k, v in confs.items():
            spark.conf.set(k, v)
        try:
            return run_query(method)
        finally:
            for k, v in saved.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)

    def run_query(method: str):
        ev = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
              .parquet(args.data))
        ckpt = work / f"{method}-{time.monotonic_ns()}"
        w = (query(method, ev).writeStream.format("noop").outputMode("append")
             .option("checkpointLocation", str(ckpt)).trigger(availableNow=True))
        jvm.System.gc()
        c0, t0 = cpu_s(pid), time.perf_counter()
        q = w.start()
        q.awaitTermination()
        wall, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
        if q.exception() is not None:
            raise RuntimeError(f"{method}: {q.exception()}")
        rows = sum(p["numInputRows"] for p in q.recentProgress)
        # numRowsTotal of the last batch's state operators: 0 under trackTotalNumberOfRows=false,
        # which shows that a variant's session confs reached the query.
        ops = [p["stateOperators"] for p in q.recentProgress if p.get("stateOperators")]
        state_rows = sum(o.get("numRowsTotal", 0) for o in ops[-1]) if ops else None
        # Time in micro-batches without input (Spark's trailing no-data batch, run when its
        # global watermark moved: native's, and ours with a skew bound's event-time timers).
        no_data_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress
                         if p["numInputRows"] == 0)
        shutil.rmtree(ckpt, ignore_errors=True)
        return wall, cpu, rows, state_rows, len(q.recentProgress), no_data_ms

    methods = args.methods.split(",")
    for _ in range(args.warmups):
        for m in methods:
            run(m)  # warm-up
    recording = None
    if args.jfr:
        # The timed runs only (not the warm-up): where each checkout's CPU goes, for
        # benchmarks/jfr_summary.py; a profile's shares are less sensitive to other load than time.
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from harness.profiling import start_recording
        tag = "".join(c if c.isalnum() or c in "-_" else "_" for c in args.label)
        recording = start_recording(spark, Path(args.jfr), tag, "+".join(methods))
    timed = {m: [] for m in methods}
    # The order rotates from round to round, so that with --runs a multiple of the number of
    # methods each one runs equally often in each place: a run right after another method's
    # (native's) runs slower than one after its own kind (seen in the round of `b5195f8`: a fixed order
    # favoured every variant that ran after a keyed run).
    for r in range(args.runs):
        for m in methods[r % len(methods):] + methods[:r % len(methods)]:
            timed[m].append(run(m))
    if recording is not None:
        from harness.profiling import stop_recording
        stop_recording(recording)
    # Which checkout's package ran, relative to the checkout (results are committed: no machine paths).
    kw_file = Path(kw.__file__).resolve()
    kw_file = str(kw_file.relative_to(kw_file.parents[2]))
    out = {"checkout": args.label, "kw_file": kw_file, "spark": spark.version}
    for m in methods:
        out[m] = {"wall": [round(r[0], 3) for r in timed[m]],
                  "cpu": [round(r[1], 2) for r in timed[m]],
                  "rows": timed[m][0][2], "state_rows": timed[m][0][3],
                  "batches": timed[m][0][4],
                  "no_data_ms": [r[5] for r in timed[m]]}
    med = {m: statistics.median(r[0] for r in timed[m]) for m in methods}
    if "native" in timed and "keyed" in timed:
        out["keyed_vs_native"] = round(med["native"] / med["keyed"], 3)
    # Each variant against its base method, in throughput (base median / variant median).
    for name, v in variants.items():
        if name in med and v["method"] in med:
            out[f"{name}_vs_{v['method']}"] = round(med[v["method"]] / med[name], 3)
    if args.variant:
        out["variants"] = list(variants.values())
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    print("AB-RESULT " + json.dumps(out), flush=True)


def summary(r: dict, methods) -> str:
    parts = [f"{r['checkout']}:"]
    for m in methods:
        parts.append(f"{m} {statistics.median(r[m]['wall']):.2f} s (cpu "
                     f"{statistics.median(r[m]['cpu']):.1f} s)")
    for k, v in r.items():
        if k.endswith("_vs_native") or k.endswith("_vs_keyed"):
            parts.append(f"{k} {v:.3f}x")
    return "  ".join(parts)


def summarize(path: str) -> str:
    """A markdown table of a results file: per checkout (or variant), the median over its
    processes of each process's ratios, with every process's value; and, for runs in rotated
    order, each method's median wall time by its place in the round."""
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    by_checkout: dict = {}
    for r in rows:
        name = r["checkout"].rsplit("#", 1)[0]
        if "sitting" in r:
            name += f" (sitting {r['sitting']}, {r.get('order', 'fixed')} order)"
        by_checkout.setdefault(name, []).append(r)
    out = ["| checkout | processes | ratio | median | per process |", "|---|---:|---|---:|---|"]
    for name, rs in by_checkout.items():
        keys = sorted({k for r in rs for k in r if "_vs_" in k})
        for k in keys:
            vals = [r[k] for r in rs if k in r]
            out.append(f"| {name} | {len(vals)} | {k} | {statistics.median(vals):.3f}x | "
                       + ", ".join(f"{v:.2f}" for v in vals) + " |")
    return "\n".join(out)


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkouts", nargs="*",
                   help="checkout directories, alternated in this order; CHECKOUT::JSON runs that "
                        "checkout with these keyword arguments of kw.keyed_watermark")
    p.add_argument("--pairs", type=int, default=2, help="rounds over the checkouts")
    p.add_argument("--runs", type=int, default=3, help="timed runs per method in each process")
    p.add_argument("--methods", default="native,keyed")
    p.add_argument("--keys", type=int, default=1_000)
    p.add_argument("--rows", type=int, default=125_000, help="rows per file (micro-batch)")
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--span-s", type=int, default=30, help="event time per file, seconds")
    p.add_argument("--data", default=None, help="input directory (default: generated in a temp dir)")
    p.add_argument("--keyed-options", default=None, metavar="JSON",
                   help="keyword arguments of kw.keyed_watermark (same for every checkout)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--variant", action="append", default=[], metavar="JSON",
                   help='an in-process variant, timed in the same JVM as the methods: '
                        '{"name": N, "method": "native"|"keyed", "options": {kw.keyed_watermark '
                        'kwargs}, "conf": {session confs set for its runs}}; add N to --methods')
    p.add_argument("--warmups", type=int, default=1, help="warm-up rounds over the methods")
    p.add_argument("--jfr", default=None, metavar="DIR",
                   help="record the timed runs of each process with Java Flight Recorder into "
                        "DIR/<checkout>_<pair>__<methods>.jfr (summarise with jfr_summary.py)")
    p.add_argument("--label", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help="append the JSON results to this file")
    p.add_argument("--summary", default=None, metavar="FILE",
                   help="print the ratios of a results file (--out) as a markdown table and exit")
    args = p.parse_args(argv)
    if args.summary:
        print(summarize(args.summary))
        return 0
    if args.child:
        child(args)
        return 0
    tmp = None
    if args.data is None:
        tmp = Path(tempfile.mkdtemp(prefix="ab-data-"))
        args.data = str(tmp / "input")
        generate(Path(args.data), args.keys, args.rows, args.batches, args.span_s * 1_000_000)
    methods = args.methods.split(",")
    results = []
    try:
        for pair in range(args.pairs):
            for spec in args.checkouts:
                # CHECKOUT or CHECKOUT::JSON (that checkout with these kw.keyed_watermark options:
                # a lever's A/B on one jar, e.g. ". ." against '.::{"max_skew": "unbounded"}').
                co, _, variant = spec.partition("::")
                name = Path(co).resolve().name + (f" {variant}" if variant else "")
                label = f"{name}#{pair + 1}"
                env = dict(os.environ, PYTHONPATH=str(Path(co).resolve() / "python"))
                cmd = [sys.executable, __file__, "--child", "--label", label, "--data", args.data,
                       "--runs", str(args.runs), "--methods", args.methods,
                       "--warmups", str(args.warmups)]
                for v in args.variant:
                    cmd += ["--variant", v]
                options = variant or args.keyed_options
                if options:
                    cmd += ["--keyed-options", options]
                for kv in args.conf:
                    cmd += ["--conf", kv]
                if args.jfr:
                    cmd += ["--jfr", str(Path(args.jfr).resolve())]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                line = [x for x in proc.stdout.splitlines() if x.startswith("AB-RESULT ")]
                if proc.returncode != 0 or not line:
                    sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-5000:])
                    raise SystemExit(f"{label} failed")
                r = json.loads(line[0][len("AB-RESULT "):])
                results.append(r)
                print(f"[{time.strftime('%H:%M:%S')}] " + summary(r, methods), flush=True)
                if args.out:
                    with open(args.out, "a") as f:
                        f.write(json.dumps(r) + "\n")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
