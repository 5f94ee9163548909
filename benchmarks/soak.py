#!/usr/bin/env python3
"""Soak: one keyed-watermarks query run for an hour or more on this machine, with device churn,
uploaders and restarts from the checkpoint; memory, state, checkpoint size and batch duration
recorded per micro-batch; results checked against the reference model at the end.

    nice -n 19 .venv/bin/python benchmarks/soak.py run --minutes 60      # the soak (not in CI)
    .venv/bin/python benchmarks/soak.py report --work DIR                # table, plot, model check again

The stream (a file source, one parquet file per micro-batch, ``maxFilesPerTrigger`` 1): file
``b`` carries the rows delivered at minute ``b`` of event time. Every minute ``--new`` devices
are born (never seen before); each lives 1-12 minutes sending a row a minute (30 % of the
minutes two), then goes silent for good. 5 % of the devices are uploaders: their rows arrive
3-40 minutes after their event time (in order). 2 % of the rows are back-dated 0-6 minutes
(some are late). The query is ``kw.keyed_watermark(events, key="device", event_time="ts",
lateness="30 seconds").window("5 minutes").agg(count, sum)`` with the default options
(``max_skew`` one hour bounds state), written to a parquet sink.

Restarts: each worker process runs its query for ``--restart-every`` seconds, stops it and
starts a new query on the same checkpoint in the same Spark session, runs it again, then exits;
the next worker is a new process (a new JVM). So half the restarts are in-process and half
start a new Spark driver.

Recorded (``WORK/metrics.jsonl``), per micro-batch from the query's progress: batch duration
(``triggerExecution``), input rows, the state operator's ``numRowsTotal``,
``memoryUsedBytes`` and RocksDB SST bytes; sampled with it (every 2 s): the driver JVM's RSS
(local mode: the executor is the same JVM, so this is also the executor's memory, RocksDB's
native memory included), its heap used and heap used after the last GC, the Python process's
RSS, the checkpoint's size on disk and the load average. ``report`` writes
``benchmarks/results/soak-<date>.md`` (table, figures, model check) and a ``.png`` plot.

Model check: ``tests/reference_model.py`` on a 1-in-``--sample`` subset of the devices (the
model is pure Python; all devices would take hours) plus, per file, one row of a sentinel key
carrying the file's max event time, so that Spark's global watermark (hence the ``max_skew``
floor) is the same as in the full stream; the sentinel's windows are left out of the
comparison. The model's windows must equal the sink's rows for those devices exactly.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
T0_US = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
MINUTE_US = 60_000_000
LATENESS_US, WINDOW_US = 30_000_000, 5 * MINUTE_US
MAX_LIFE, MAX_DELAY, BACKDATE = 12, 40, 6  # minutes
REACH = MAX_LIFE + MAX_DELAY + 1  # files a device's rows can span after its birth
SENTINEL = "~sentinel"


# ---------------------------------------------------------------- the stream (deterministic)

class Stream:
    """Rows per file, a pure function of (seed, new devices a minute, file index)."""

    def __init__(self, new: int, seed: int = 11):
        self.new, self.seed = new, seed
        self.cache: Dict[int, dict] = {}

    def origin(self, o: int) -> dict:
        """Every row of the devices born at minute ``o``, with the file it is delivered in."""
        if o in self.cache:
            return self.cache[o]
        rng = np.random.default_rng([self.seed, o])
        life = rng.integers(1, MAX_LIFE + 1, self.new)
        delay = np.where(rng.random(self.new) < 0.05, rng.integers(3, MAX_DELAY + 1, self.new), 0)
        dev = np.repeat(np.arange(self.new), life)
        minute = o + np.concatenate([np.arange(n) for n in life])
        twice = rng.random(len(dev)) < 0.3
        dev, minute = np.concatenate([dev, dev[twice]]), np.concatenate([minute, minute[twice]])
        ts = T0_US + minute * MINUTE_US + rng.integers(0, MINUTE_US, len(dev))
        back = rng.random(len(dev)) < 0.02
        ts = ts - np.where(back, rng.integers(0, BACKDATE * MINUTE_US, len(dev)), 0)
        temp = rng.integers(0, 40, len(dev)).astype(np.float64)
        out = {"dev": dev, "file": minute + delay[dev], "ts": ts, "temp": temp}
        self.cache[o] = out
        for old in [k for k in self.cache if k < o - REACH - 2]:
            del self.cache[old]
        return out

    def rows(self, b: int, sample: int = 1) -> Tuple[List[str], np.ndarray, np.ndarray]:
        """File b's rows (devices with index % sample == 0 only, when sample > 1)."""
        names, tss, temps = [], [], []
        for o in range(max(0, b - REACH), b + 1):
            g = self.origin(o)
            m = g["file"] == b
            if sample > 1:
                m &= g["dev"] % sample == 0
            names.extend(f"d{o:06d}-{i}" for i in g["dev"][m])
            tss.append(g["ts"][m])
            temps.append(g["temp"][m])
        return names, np.concatenate(tss), np.concatenate(temps)

    def write(self, directory: Path, b: int) -> None:
        names, ts, temp = self.rows(b)
        table = pa.table({"device": pa.array(names, pa.string()),
                          "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
                          "temp": pa.array(temp)})
        tmp = directory / f".batch-{b:06d}.parquet"  # hidden: the file source skips it
        pq.write_table(table, tmp)
        final = directory / f"batch-{b:06d}.parquet"
        os.replace(tmp, final)
        os.utime(final, (1_000_000 + b, 1_000_000 + b))  # the source orders files by time

    def devices_born(self, files: int) -> int:
        return self.new * files


# ---------------------------------------------------------------- the worker (a Spark driver)

def dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def worker(args) -> int:
    from pyspark.sql import SparkSession, functions as F

    sys.path.insert(0, str(REPO / "python"))
    import keyed_watermarks as kw

    work = Path(args.work)
    started = time.time()
    builder = (SparkSession.builder.master("local[2]").appName("soak")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", args.driver_memory))
    spark = kw.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    runtime = jvm.java.lang.Runtime.getRuntime()
    pools = [p for p in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
             if str(p.getType().toString()) == "Heap memory"]
    log = open(work / "metrics.jsonl", "a")

    def emit(rec: dict) -> None:
        log.write(json.dumps(rec) + "\n")
        log.flush()

    emit({"kind": "process", "t": time.time(), "worker": args.worker, "pid": pid,
          "session_s": time.time() - started})
    ckpt_size, ckpt_at = 0, 0.0
    for segment in range(args.segments):
        if time.time() >= args.until:
            break
        t_start = time.time()
        events = (spark.readStream.schema("device STRING, ts TIMESTAMP, temp DOUBLE")
                  .option("maxFilesPerTrigger", 1).parquet(str(work / "in")))
        out = (kw.keyed_watermark(events, key="device", event_time="ts", lateness="30 seconds")
               .window("5 minutes").agg(F.count("*").alias("n"), F.sum("temp").alias("total")))
        q = (out.writeStream.format("parquet").outputMode("append")
             .option("path", str(work / "out")).option("checkpointLocation", str(work / "ckpt")).start())
        emit({"kind": "start", "t": time.time(), "worker": args.worker, "segment": segment,
              "start_s": time.time() - t_start})
        seen = set()
        stop_at = min(args.until, t_start + args.restart_every)
        while True:
            time.sleep(2)
            if q.exception() is not None:
                emit({"kind": "error", "t": time.time(), "error": str(q.exception())[:2000]})
                return 1
            now = time.time()
            if now - ckpt_at > 10:
                ckpt_size, ckpt_at = dir_bytes(work / "ckpt"), now
            heap_used = int(runtime.totalMemory()) - int(runtime.freeMemory())
            after_gc = sum(int(p.getCollectionUsage().getUsed()) for p in pools if p.getCollectionUsage() is not None)
            sample = {"rss": rss_bytes(pid), "heap": heap_used, "heap_after_gc": after_gc,
                      "py_rss": rss_bytes(os.getpid()), "ckpt_bytes": ckpt_size,
                      "load1": os.getloadavg()[0], "load5": os.getloadavg()[1]}
            for p in q.recentProgress:
                if p["batchId"] in seen:
                    continue
                seen.add(p["batchId"])
                ops = p.get("stateOperators") or [{}]
                op = ops[0]
                emit({"kind": "batch", "t": time.time(), "worker": args.worker, "segment": segment,
                      "batch": p["batchId"], "timestamp": p["timestamp"],
                      "rows": p.get("numInputRows", 0),
                      "duration_ms": p["durationMs"].get("triggerExecution", 0),
                      "add_batch_ms": p["durationMs"].get("addBatch", 0),
                      "state_rows": op.get("numRowsTotal"), "state_mem": op.get("memoryUsedBytes"),
                      "state_removed": op.get("numRowsRemoved"),
                      "sst": int((op.get("customMetrics") or {}).get("rocksdbSstFileSize", 0)),
                      **sample})
            if now >= stop_at:
                break
        q.stop()
        emit({"kind": "stop", "t": time.time(), "worker": args.worker, "segment": segment})
    spark.stop()
    return 0


# ---------------------------------------------------------------- the orchestrator

def source_files_done(work: Path) -> int:
    """Files the source has taken into a batch (its log's highest batch id + 1)."""
    d = work / "ckpt" / "sources" / "0"
    ids = [int(p.name.split(".")[0]) for p in d.glob("*") if p.name.split(".")[0].isdigit()] if d.exists() else []
    return max(ids) + 1 if ids else 0


def run(args) -> int:
    work = Path(args.work)
    (work / "in").mkdir(parents=True, exist_ok=True)
    stream = Stream(args.new)
    (work / "config.json").write_text(json.dumps({"new": args.new, "minutes": args.minutes,
                                                  "restart_every": args.restart_every, "sample": args.sample,
                                                  "started": time.time()}))
    end = time.time() + args.minutes * 60
    written = [0]
    stop = threading.Event()

    def feed() -> None:
        # Keep 30 files ahead of the source, so no batch waits for its file.
        while not stop.is_set():
            while written[0] < source_files_done(work) + 30:
                stream.write(work / "in", written[0])
                written[0] += 1
            stop.wait(1)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    while written[0] < 30:
        time.sleep(0.5)
    w = failures = 0
    rc = 0
    while time.time() < end - 30:
        cmd = [sys.executable, __file__, "worker", "--work", str(work), "--worker", str(w),
               "--until", str(end), "--restart-every", str(args.restart_every), "--segments", "2",
               "--driver-memory", args.driver_memory]
        with open(work / f"worker-{w}.log", "w") as wlog:
            rc = subprocess.call(cmd, stdout=wlog, stderr=subprocess.STDOUT)
        if rc != 0:
            # Recorded in metrics.jsonl (kind "error"); the next worker resumes the checkpoint.
            print(f"worker {w} failed ({rc}), see {work}/worker-{w}.log", file=sys.stderr)
            failures += 1
            if failures >= 3:
                break
        w += 1
    stop.set()
    feeder.join()
    (work / "written.json").write_text(json.dumps({"written": written[0]}))
    report(argparse.Namespace(work=str(work), out=args.out, sample=args.sample, new=args.new))
    return rc


# ---------------------------------------------------------------- the report

def sink_rows(work: Path, sample: int = 1) -> Tuple[List[dict], int]:
    """The sink's committed rows (the files its metadata log lists), without Spark: those of
    the devices with index % sample == 0, and the number of all rows."""
    meta = work / "out" / "_spark_metadata"
    paths = set()
    for f in meta.glob("*"):
        if not f.name.split(".")[0].isdigit():
            continue
        for line in f.read_text().splitlines():
            if line.startswith("{"):
                e = json.loads(line)
                if e.get("action", "add") == "add":
                    paths.add(e["path"])
                else:
                    paths.discard(e["path"])
    rows, everything = [], 0
    for p in sorted(paths):
        local = p[len("file:"):] if p.startswith("file:") else p
        table = pq.read_table(local)
        everything += table.num_rows
        keep = [int(d.split("-")[1]) % sample == 0 for d in table.column("device").to_pylist()]
        t = table.filter(pa.array(keep, pa.bool_())).to_pydict()
        for dev, win, n, total in zip(t["device"], t["window"], t["n"], t["total"]):
            rows.append({"device": dev, "start": win["start"], "n": n, "total": total})
    return rows, everything


def last_batch_files(work: Path) -> int:
    """Files read by the batches whose output the sink committed: the source offset of the
    sink's latest batch (or of the latest committed batch, whichever is later)."""
    ids = []
    for d in (work / "out" / "_spark_metadata", work / "ckpt" / "commits"):
        ids += [int(p.name.split(".")[0]) for p in d.glob("*") if p.name.split(".")[0].isdigit()]
    last = max(ids)
    lines = (work / "ckpt" / "offsets" / str(last)).read_text().splitlines()
    offset = json.loads(lines[-1])
    return int(offset["logOffset"]) + 1


def model_check(work: Path, sample: int, new: int) -> dict:
    sys.path.insert(0, str(REPO / "tests"))
    from reference_model import run_model

    files = last_batch_files(work)
    stream = Stream(new)
    # A micro-batch may read more than one file: after a restart the file source can hand the
    # first batch the file an unfinished batch had listed plus the next one. The progress records
    # give each batch's input rows; files are assigned to batches in order until they add up
    # (a batch without a record, if any, read one file).
    recorded = {}
    for line in (work / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["kind"] == "batch":
            recorded[r["batch"]] = r["rows"]
    per_file = []
    for b in range(files):
        names, ts, temp = stream.rows(b, sample)
        full_names, full_ts, _ = stream.rows(b)
        per_file.append(([(k, int(t), float(v)) for k, t, v in zip(names, ts, temp)], len(full_names),
                         int(full_ts.max())))
    batches, f, batch_id, merged = [], 0, 0, 0
    while f < files:
        want, rows, got, top = recorded.get(batch_id), [], 0, None
        while f < files and (got == 0 or (want is not None and got < want)):
            rows += per_file[f][0]
            got += per_file[f][1]
            top = per_file[f][2] if top is None else max(top, per_file[f][2])
            f += 1
        if want is not None and want != got:
            raise RuntimeError(f"batch {batch_id}: {want} input rows, files give {got}")
        merged += got > per_file[f - 1][1]
        rows.append((SENTINEL, top, 0.0))
        batches.append(rows)
        batch_id += 1
    t0 = time.time()
    res = run_model(batches, LATENESS_US, WINDOW_US)
    model_s = time.time() - t0
    last = res.batches - 1
    trailing = len(batches)  # the model's no-data batch after the last file (may not have run)
    expected, optional = Counter(), Counter()
    for w in res.emitted:
        if w.key == SENTINEL:
            continue
        item = (w.key, w.start, len(w.values), float(sum(w.values)))
        (optional if w.batch == trailing else expected)[item] += 1
    got = Counter()
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    sampled, everything = sink_rows(work, sample)
    for r in sampled:
        dev = r["device"]
        start = r["start"]
        if start.tzinfo is None:
            start = start.replace(tzinfo=datetime.timezone.utc)
        us = (start - epoch) // datetime.timedelta(microseconds=1)
        got[(dev, us, r["n"], float(r["total"]))] += 1
    missing = expected - got
    extra = got - expected - optional
    return {"files": files, "sample": sample, "model_windows": sum(expected.values()),
            "trailing_optional": sum(optional.values()), "sink_windows": sum(got.values()),
            "sink_windows_all": everything, "missing": sum(missing.values()), "extra": sum(extra.values()),
            "examples": [str(x) for x in list(missing)[:3] + list(extra)[:3]],
            "late_rows_model": sum(res.late.values()), "model_s": round(model_s, 1),
            "model_batches": last + 1, "multi_file_batches": merged, "equal": not missing and not extra}


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def report(args) -> int:
    work = Path(args.work)
    cfg = json.loads((work / "config.json").read_text())
    sample = getattr(args, "sample", None) or cfg["sample"]
    recs = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines() if line.strip()]
    batches = [r for r in recs if r["kind"] == "batch"]
    starts = [r for r in recs if r["kind"] == "start"]
    procs = [r for r in recs if r["kind"] == "process"]
    errors = [r for r in recs if r["kind"] == "error"]
    t0 = cfg["started"]
    data = [r for r in batches if r["rows"] > 0]
    for r in batches:
        r["min"] = (r["t"] - t0) / 60
    files = last_batch_files(work)
    check = model_check(work, sample, cfg["new"])
    date = datetime.datetime.fromtimestamp(t0, datetime.timezone.utc).strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else HERE / "results" / f"soak-{date}.md"
    png = out.with_suffix(".png")

    # Per 5-minute interval of wall time.
    buckets: Dict[int, List[dict]] = {}
    for r in batches:
        buckets.setdefault(int(r["min"] // 5), []).append(r)
    table = ["| wall min | batches (data) | input rows | batch ms p50 / max | state rows (last) | "
             "state memoryUsedBytes | RocksDB SST | checkpoint on disk | JVM RSS max | heap after GC | "
             "load avg 1 min |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k in sorted(buckets):
        rs = buckets[k]
        ds = [r for r in rs if r["rows"] > 0] or rs
        dur = sorted(r["duration_ms"] for r in ds)
        lastr = rs[-1]
        table.append(
            f"| {k * 5}-{k * 5 + 5} | {len(rs)} ({len([r for r in rs if r['rows'] > 0])}) | "
            f"{sum(r['rows'] for r in rs):,} | {dur[len(dur) // 2]:,} / {dur[-1]:,} | "
            f"{lastr['state_rows'] or 0:,} | {fmt_bytes(lastr['state_mem'])} | {fmt_bytes(lastr['sst'])} | "
            f"{fmt_bytes(lastr['ckpt_bytes'])} | {fmt_bytes(max(r['rss'] for r in rs))} | "
            f"{fmt_bytes(lastr['heap_after_gc'])} | {max(r['load1'] for r in rs):.1f} |")

    def first_last(key: str, rs: List[dict], n: int = 20) -> Tuple[float, float]:
        a = sorted(r[key] or 0 for r in rs[:n])
        b = sorted(r[key] or 0 for r in rs[-n:])
        return a[len(a) // 2], b[len(b) // 2]

    steady = [r for r in data if r["min"] >= 15] or data
    wall = (max(r["t"] for r in recs) - t0) / 60
    devices = cfg["new"] * files
    total_rows = sum(r["rows"] for r in batches)
    restarts = len(starts) - 1
    new_process = len(procs) - 1
    summary = {
        "wall_minutes": round(wall, 1), "files": files, "devices": devices, "input_rows": total_rows,
        "batches": len(batches), "data_batches": len(data), "restarts": restarts,
        "restarts_new_process": new_process, "errors": len(errors),
        "startup_s_median": sorted(r["start_s"] for r in starts)[len(starts) // 2] if starts else None,
        "check": check,
    }
    lines = [
        f"# Soak, {date}", "",
        "One keyed-watermarks query (`keyed_watermark(..., lateness=\"30 seconds\").window(\"5 minutes\")"
        ".agg(count, sum)`, default options: `max_skew` one hour) on a parquet file source, one file a "
        "micro-batch, restarted from its checkpoint every few minutes; local[2], 2 shuffle partitions, "
        "RocksDB state store, driver memory " + "2g, run with `nice -n 19` on a 2-core machine shared "
        "with other engineers' builds and tests (the load average column). Command:", "",
        "```bash",
        f"nice -n 19 .venv/bin/python benchmarks/soak.py run --minutes {cfg['minutes']} --new {cfg['new']} "
        f"--restart-every {cfg['restart_every']} --sample {sample}",
        "```", "",
        "## Figures", "",
        f"- Wall time: {wall:.1f} min; {len(batches):,} micro-batches ({len(data):,} with data), "
        f"{files:,} files = {files:,} minutes of event time.",
        f"- Devices: {devices:,} distinct ({cfg['new']:,} new a minute of event time, each active 1-12 min, "
        f"then silent; 5 % uploaders 3-40 min behind); {total_rows:,} input rows.",
        f"- Restarts: {restarts} ({new_process} in a new process with a new Spark driver, the rest a new query "
        f"in the same session); median time from `start()` call to the query running: "
        f"{summary['startup_s_median']:.1f} s. Errors: {len(errors)}.",
    ]
    for key, label, f in (("state_rows", "State rows (numRowsTotal)", lambda v: f"{v:,.0f}"),
                          ("state_mem", "State memoryUsedBytes", fmt_bytes),
                          ("sst", "RocksDB SST bytes", fmt_bytes),
                          ("ckpt_bytes", "Checkpoint on disk", fmt_bytes),
                          ("rss", "JVM RSS (driver = executor, local mode)", fmt_bytes),
                          ("heap_after_gc", "JVM heap used after last GC", fmt_bytes),
                          ("heap", "JVM heap used (sampled)", fmt_bytes),
                          ("py_rss", "Python driver RSS", fmt_bytes),
                          ("duration_ms", "Batch duration (ms)", lambda v: f"{v:,.0f}"),
                          ("rows", "Input rows a batch", lambda v: f"{v:,.0f}"),
                          ("load1", "Load average (1 min)", lambda v: f"{v:.2f}")):
        a, _ = first_last(key, steady)
        _, b = first_last(key, data)
        s0, _ = first_last(key, data)
        lines.append(f"- {label}: first 20 data batches {f(s0)}; at 15 min {f(a)}; last 20 {f(b)} (medians).")
    c = check
    lines += [
        "", "## Result check", "",
        f"Reference model (`tests/reference_model.py`) on 1 device in {c['sample']} plus the sentinel key "
        f"carrying each file's max event time (so Spark's global watermark and the `max_skew` floor are "
        f"the full stream's), over the {c['files']:,} files the committed batches read "
        f"(model: {c['model_s']} s): model windows {c['model_windows']:,} (+{c['trailing_optional']} "
        f"that its trailing no-data batch would emit), sink windows for those devices {c['sink_windows']:,} "
        f"(of {c['sink_windows_all']:,} windows in the sink), "
        f"missing {c['missing']}, extra {c['extra']}: **{'equal' if c['equal'] else 'NOT equal'}**. "
        f"Micro-batches that read two files or more (the first after a restart): {c['multi_file_batches']}. "
        f"Late rows in the model's sample: {c['late_rows_model']:,}.",
    ]
    if c["examples"]:
        lines.append(f"Examples: {c['examples']}")
    lines += ["", "## Per 5 minutes of wall time", "", *table, "",
              f"![soak]({png.name})", ""]
    if errors:
        lines += ["## Errors", "", *[f"- {e['error'][:500]}" for e in errors], ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1))
    plot(batches, starts, procs, t0, png)
    print("\n".join(lines))
    return 0


def plot(batches: List[dict], starts: List[dict], procs: List[dict], t0: float, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mins = [r["min"] for r in batches]
    fig, axes = plt.subplots(5, 1, figsize=(10, 13), sharex=True)
    panels = [
        ("memory (MiB)", [("JVM RSS", "rss"), ("heap used", "heap"), ("heap after GC", "heap_after_gc"),
                          ("Python RSS", "py_rss")], 2 ** 20),
        ("state rows (thousands)", [("numRowsTotal", "state_rows")], 1e3),
        ("state bytes (MiB)", [("memoryUsedBytes", "state_mem"), ("RocksDB SST", "sst"),
                               ("checkpoint on disk", "ckpt_bytes")], 2 ** 20),
        ("batch duration (s)", [("triggerExecution", "duration_ms")], 1e3),
        ("load average", [("1 min", "load1"), ("5 min", "load5")], 1),
    ]
    for ax, (title, series, scale) in zip(axes, panels):
        for label, key in series:
            ax.plot(mins, [(r[key] or 0) / scale for r in batches], ".", ms=2, label=label)
        for s in starts:
            ax.axvline((s["t"] - t0) / 60, color="grey", lw=0.3)
        ax.set_ylabel(title)
        ax.legend(loc="upper left", fontsize=7, markerscale=4)
        ax.set_ylim(bottom=0)
    axes[-1].set_xlabel("wall-clock minutes (grey lines: query restarts)")
    fig.tight_layout()
    fig.savefig(png, dpi=80)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--work", default="build/soak")
    r.add_argument("--minutes", type=float, default=60)
    r.add_argument("--new", type=int, default=2000, help="new devices a minute of event time (a file)")
    r.add_argument("--restart-every", type=float, default=180)
    r.add_argument("--sample", type=int, default=50, help="model check on 1 device in N")
    r.add_argument("--driver-memory", default="2g")
    r.add_argument("--out", default=None)
    w = sub.add_parser("worker")
    w.add_argument("--work", required=True)
    w.add_argument("--worker", type=int, required=True)
    w.add_argument("--until", type=float, required=True)
    w.add_argument("--restart-every", type=float, required=True)
    w.add_argument("--segments", type=int, default=2)
    w.add_argument("--driver-memory", default="2g")
    p = sub.add_parser("report")
    p.add_argument("--work", default="build/soak")
    p.add_argument("--sample", type=int, default=None)
    p.add_argument("--out", default=None)
    args = ap.parse_args()
    return {"run": run, "worker": worker, "report": report}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
