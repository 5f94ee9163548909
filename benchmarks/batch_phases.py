"""Where a micro-batch's time goes, native against keyed, by Spark's own accounts (issue 42).

Issue 42's small micro-batches by default (ab_checkouts.py's workload: 1,000 devices, 40 files
of 4,000 rows, 5 s of event time each; count + avg over 60 s windows, lateness 10 s, default
options, ``local[2]``, 2 shuffle partitions, RocksDB, ``availableNow``, ``noop`` sink). One
process: native, keyed and each ``--variant`` (keyed with other options) take turns, a warm-up
round and then ``--rounds`` rounds, the order rotated from round to round, with Spark's event
log on. Per method, the median over the
micro-batches with input (the trailing no-data micro-batch is left out) of:

- the progress's phases (``durationMs``: ``queryPlanning``, ``addBatch``, ``walCommit``, ...);
- the state operator's metrics (``allUpdatesTimeMs``, ``timerProcessingTimeMs``,
  ``commitTimeMs`` and RocksDB's commit latencies; summed over the micro-batch's tasks);
- each task of the two stages, from the event log: the map stage (scan, partial aggregation,
  shuffle write; a ``ShuffleMapTask``) and the state stage (shuffle read, the state operator,
  the sink; a ``ResultTask``): run time, CPU time, deserialization time, result size;

and, on the last micro-batch's analyzed plan of each method, the time of one run of Spark's
optimizer and of its planner (the medians of 50 runs each, after 30 warm-up runs), with the
optimizer's rules that take the most time in total (Spark's ``RuleExecutor`` metering). A
micro-batch's plan is optimized and planned again in every micro-batch.

Time is wall time on a shared machine: compare the methods within one run, not across runs.

    .venv/bin/python benchmarks/batch_phases.py --rounds 4 \
        --variant unbounded='{"max_skew": "unbounded"}' --out phases.md
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_checkouts import SCHEMA, generate, workload_query  # noqa: E402

METHODS = ("native", "keyed")
# The state operator's metrics worth reading at this size (others are counts or constant).
STATE_METRICS = ("allUpdatesTimeMs", "allRemovalsTimeMs", "timerProcessingTimeMs", "commitTimeMs",
                 "rocksdbCommitFileSyncLatencyMs", "rocksdbCommitFlushLatency",
                 "rocksdbCommitCheckpointLatency", "rocksdbSaveZipFilesLatencyMs", "numRowsUpdated",
                 "rocksdbNumInternalColFamiliesKeys", "rocksdbSstFileSize")
TASK_METRICS = (("run ms", "Executor Run Time", 1.0), ("CPU ms", "Executor CPU Time", 1e-6),
                ("deserialize ms", "Executor Deserialize Time", 1.0), ("result KB", "Result Size", 1 / 1024))


def query(spark, kw, method: str, data: str, variants: Dict[str, dict]):
    ev = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(data)
    if method in variants:
        return workload_query(kw, "keyed", ev, variants[method])
    return workload_query(kw, method, ev, {})


def planning_times(spark, analyzed) -> Dict[str, object]:
    """One run of the optimizer and of the planner on `analyzed`, and the optimizer's rules."""
    state = spark._jsparkSession.sessionState()
    metering = spark.sparkContext._jvm.org.apache.spark.sql.catalyst.rules.RuleExecutor
    for _ in range(30):
        optimized = state.optimizer().execute(analyzed)
    optimize, plan = [], []
    metering.resetMetrics()
    for _ in range(50):
        t0 = time.perf_counter()
        optimized = state.optimizer().execute(analyzed)
        t1 = time.perf_counter()
        state.planner().plan(optimized).next()
        plan.append(time.perf_counter() - t1)
        optimize.append(t1 - t0)
    rules = []
    for line in metering.dumpTimeSpent().splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[2] == "/" and parts[3].isdigit():
            rules.append((parts[0].rsplit(".", 1)[-1], int(parts[3]) / 50 / 1e6))
    rules.sort(key=lambda r: -r[1])
    return {"optimize_ms": statistics.median(optimize) * 1e3, "plan_ms": statistics.median(plan) * 1e3,
            "rules_ms": rules[:8]}


def run(args) -> dict:
    from pyspark.sql import SparkSession

    import keyed_watermarks as kw

    work = Path(tempfile.mkdtemp(prefix="kw-phases-"))
    data = args.data or str(work / "data")
    if not args.data:
        print(f"generating {args.batches} files of {args.rows:,} rows", flush=True)
        generate(Path(data), args.keys, args.rows, args.batches, args.span_s * 1_000_000)
    events = work / "events"
    events.mkdir()
    builder = (SparkSession.builder.master("local[2]").appName("batch-phases")
               .config("spark.driver.memory", "4g")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.adaptive.enabled", "false")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.eventLog.enabled", "true")
               .config("spark.eventLog.compress", "false")
               .config("spark.eventLog.dir", str(events)))
    spark = kw.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    runs: List[dict] = []
    planning = {}
    methods = methods_of(args)
    for r in range(args.rounds + 1):
        # The order rotates from round to round: a run right after another method's can be slower.
        for method in methods[r % len(methods):] + methods[:r % len(methods)]:
            ckpt = work / f"ckpt-{method}-{r}"
            t0 = time.perf_counter()
            q = (query(spark, kw, method, data, args.variants).writeStream.format("noop").outputMode("append")
                 .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
            q.awaitTermination()
            wall = time.perf_counter() - t0
            if q.exception() is not None:
                raise RuntimeError(f"{method}: {q.exception()}")
            progress = q.recentProgress
            if r == args.rounds:
                planning[method] = planning_times(spark, q._jsq.streamingQuery().lastExecution().analyzed())
            runs.append({"method": method, "round": r, "id": q.id, "wall_s": round(wall, 3),
                         "warmup": r == 0, "progress": [json.loads(p.json) for p in progress]})
            print(f"round {r}{' (warm-up)' if r == 0 else ''}: {method} {wall:.2f} s, "
                  f"{len(progress)} micro-batches", flush=True)
            shutil.rmtree(ckpt, ignore_errors=True)
    spark.stop()
    log = [json.loads(line) for f in glob.glob(str(events / "**" / "*"), recursive=True)
           if os.path.isfile(f) and not os.path.basename(f).startswith((".", "appstatus"))
           for line in open(f)]
    shutil.rmtree(work, ignore_errors=True)
    return {"runs": runs, "tasks": task_metrics(log, runs), "planning": planning}


def task_metrics(log: List[dict], runs: List[dict]) -> Dict[str, Dict[str, List[float]]]:
    """Per method, each timed run's tasks' metrics, by stage kind, from the event log."""
    method = {r["id"]: r["method"] for r in runs if not r["warmup"]}
    methods = sorted(set(method.values()))
    stage_query = {}
    for e in log:
        if e["Event"] == "SparkListenerJobStart":
            qid = e.get("Properties", {}).get("sql.streaming.queryId")
            stage_query.update({s: qid for s in e["Stage IDs"]})
    out: Dict[str, Dict[str, List[float]]] = {m: collections.defaultdict(list) for m in methods}
    for e in log:
        if e["Event"] != "SparkListenerTaskEnd" or stage_query.get(e["Stage ID"]) not in method:
            continue
        stage = "state" if e["Task Type"] == "ResultTask" else "map"
        for name, field, scale in TASK_METRICS:
            out[method[stage_query[e["Stage ID"]]]][f"{stage} task {name}"].append(e["Task Metrics"][field] * scale)
    return out


def med(xs) -> str:
    return f"{statistics.median(xs):,.1f}" if xs else "–"


def methods_of(args) -> List[str]:
    return list(METHODS) + list(args.variants)


def report(res: dict, args) -> str:
    methods = methods_of(args)
    timed = [r for r in res["runs"] if not r["warmup"]]
    phases: Dict[str, Dict[str, List[float]]] = {m: collections.defaultdict(list) for m in methods}
    state: Dict[str, Dict[str, List[float]]] = {m: collections.defaultdict(list) for m in methods}
    for r in timed:
        for p in r["progress"]:
            if p["numInputRows"] == 0:
                continue
            for k, v in p["durationMs"].items():
                phases[r["method"]][k].append(v)
            for op in p.get("stateOperators") or []:
                for k in STATE_METRICS:
                    v = op.get(k, (op.get("customMetrics") or {}).get(k))
                    if v is not None:
                        state[r["method"]][k].append(v)
    walls = {m: [r["wall_s"] for r in timed if r["method"] == m] for m in methods}
    tasks = {m: res["tasks"].get(m, {}) for m in methods}
    lines = [f"{len(walls['native'])} timed runs per method ({args.batches} files of {args.rows:,} rows, "
             f"{args.keys:,} devices); medians over the micro-batches with input.", ""]
    for name, options in args.variants.items():
        lines += [f"`{name}`: keyed with `{json.dumps(options)}`.", ""]
    lines += ["| | " + " | ".join(methods) + " | keyed - native |",
              "|---|" + "---:|" * (len(methods) + 1)]

    def row(name, values):
        a, b = values["native"], values["keyed"]
        diff = f"{statistics.median(b) - statistics.median(a):+,.1f}" if a and b else "–"
        lines.append(f"| {name} | " + " | ".join(med(values[m]) for m in methods) + f" | {diff} |")

    row("**run, s** (query start to end)", walls)
    for k in ("triggerExecution", "queryPlanning", "addBatch", "latestOffset", "getBatch", "walCommit",
              "commitOffsets"):
        row(f"micro-batch `{k}` ms", {m: phases[m][k] for m in methods})
    for k in STATE_METRICS:
        row(f"state operator `{k}`", {m: state[m][k] for m in methods})
    for k in sorted({k for m in methods for k in tasks[m]}):
        row(k, {m: tasks[m].get(k, []) for m in methods})
    lines.append("")
    for m in methods:
        p = res["planning"][m]
        lines.append(f"- {m}: optimizer {p['optimize_ms']:.2f} ms a run, planner {p['plan_ms']:.2f} ms; "
                     "the optimizer's rules by total time, ms a run: "
                     + ", ".join(f"{name} {ms:.2f}" for name, ms in p["rules_ms"]))
    return "\n".join(lines)


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4, help="timed rounds (each runs both methods)")
    p.add_argument("--keys", type=int, default=1_000)
    p.add_argument("--rows", type=int, default=4_000, help="rows per file (micro-batch)")
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--span-s", type=int, default=5, help="event time per file, seconds")
    p.add_argument("--data", default=None, help="input directory (default: generated in a temp dir)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                   help="also run keyed with these keyword arguments of kw.keyed_watermark, as NAME "
                        """(e.g. unbounded='{"max_skew": "unbounded"}')""")
    p.add_argument("--out", default=None, help="write the table here (and the raw data beside it, .json)")
    args = p.parse_args(argv)
    args.variants = {}
    for v in args.variant:
        name, _, options = v.partition("=")
        if not name or name in METHODS or not options:
            p.error(f"--variant {v!r}: expected NAME=JSON with a NAME other than {', '.join(METHODS)}")
        args.variants[name] = json.loads(options)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    res = run(args)
    table = report(res, args)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            {"planning": res["planning"], "tasks": res["tasks"],
             "runs": [{k: v for k, v in r.items() if k != "progress"} | {
                 "durationMs": [q["durationMs"] for q in r["progress"]],
                 "numInputRows": [q["numInputRows"] for q in r["progress"]]} for r in res["runs"]]}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
