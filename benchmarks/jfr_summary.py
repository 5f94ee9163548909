#!/usr/bin/env python3
"""Summarises Java Flight Recordings of the benchmark (run_benchmarks.py --profile DIR).

    .venv/bin/python benchmarks/jfr_summary.py DIR/*.jfr [--top 15] [--out summary.md]
        [--under FRAME ...] [--batches N ...]

For each recording: CPU samples of the driver JVM (local mode: it runs the tasks too) split by
thread (task threads, the stream execution thread, the rest) and by *area*, the state areas
by caller, and the top self and total methods. Samples are `jdk.ExecutionSample` (threads
running Java code, every 10 ms with JFR's `profile` settings) and the `jdk.NativeMethodSample`s
(every 20 ms, so they weigh 2) whose top frame is a CPU-bound JNI library (RocksDB,
compression codecs): a thread inside RocksDB's JNI is not running Java code, so it never
appears in execution samples. Idle and blocked threads are not sampled; RocksDB's own
background threads (compaction, flush) are native threads that JFR does not see at all.

A sample's area is the first frame, walking from the leaf to the root, that matches one of the
patterns in AREAS (so a hash-map lookup inside our partial aggregation counts as partial
aggregation, a RocksDB get under our operator as RocksDB). Needs the JDK's `jfr` tool on the
PATH (or $JAVA_HOME/bin).

`--under FRAME` (repeatable) adds a table of the CPU sampled under each frame whose name
contains FRAME (inclusive, by thread group); with `--batches N` (the micro-batches a recording
covers: its timed runs x batches per run; one N for all recordings or one per recording, in
their order) in ms per micro-batch. A task-thread figure is summed over the tasks that run
side by side.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

EXEC_WEIGHT_MS, NATIVE_WEIGHT_MS = 10, 20
NATIVE_CPU = ("org.rocksdb.", "org.xerial.snappy.", "com.github.luben.zstd.", "net.jpountz.",
              "io.airlift.compress.")

# (area, substrings of "class.method"); the first matching frame from the leaf decides.
AREAS: List[Tuple[str, Tuple[str, ...]]] = [
    ("observe() metrics (CollectMetricsExec)", ("CollectMetricsExec", "AggregatingAccumulator")),
    ("state: RocksDB commit/snapshot/load", (
        "state.RocksDB.commit", "state.RocksDB.load", "RocksDBFileManager", "org.rocksdb.Checkpoint",
        "state.RocksDB.flush", "state.RocksDB.createSnapshot", "state.RocksDB.uploadSnapshot",
        "RocksDBStateStoreProvider.doMaintenance", "state.RocksDB.close", "state.RocksDB.rollback",
        "StateStore$.doMaintenance", "state.RocksDB.metrics", "RocksDBStateStore.metrics",
        "org.rocksdb.RocksDB.flush", "org.rocksdb.RocksDB.open", "org.rocksdb.RocksDB.getProperty",
        "org.rocksdb.RocksDB.getLongProperty", "org.rocksdb.Statistics")),
    ("state: RocksDB get/put/iterate", ("org.rocksdb.", "state.RocksDB.", "RocksDBStateStore",
                                        "RocksDBStateEncoder", "RocksDBIterator")),
    ("state: key/value encoders", ("StateEncoder", "StateTypesEncoder", "DataEncoder",
                                   "AvroStateEncoder", "StateSchemaCompatibility",
                                   "StateStoreColumnFamilySchemaUtils")),
    ("state: transformWithState state API", ("ValueStateImpl", "MapStateImpl", "ListStateImpl",
                                             "StatefulProcessorHandleImpl", "TimerStateImpl")),
    ("native: state save/restore (StateStoreSave/RestoreExec)", (
        "StateStoreSaveExec", "StateStoreRestoreExec", "StreamingAggregationStateManager",
        "WatermarkSupport", "StateStoreWriter", "streaming.state.StateStore")),
    ("Row<->InternalRow (encoders, object operators)", (
        "ExpressionEncoder$Serializer", "ExpressionEncoder$Deserializer", "SparkInternals$RowConverter",
        "CatalystTypeConverters", "GenericRowWithSchema", "ObjectOperator", "DeserializeToObjectExec",
        "SerializeFromObjectExec", "org.apache.spark.sql.Row.", "ScalaReflection")),
    ("ours: operator (KeyedWindowProcessor, emitter, KeyState)", (
        "io.github.keyedwatermarks.operator.", "io.github.keyedwatermarks.emission.",
        "io.github.keyedwatermarks.state.", "io.github.keyedwatermarks.watermark.")),
    ("ours: aggregate buffers (CatalystAggregation)", ("io.github.keyedwatermarks.catalyst.CatalystAggregation",)),
    ("ours: partial aggregation (KeyedPartialAggregateExec)", (
        "io.github.keyedwatermarks.partials.",
        "io.github.keyedwatermarks.window.")),
    ("transformWithState operator (TransformWithStateExec)", ("TransformWithStateExec", "TransformWithState")),
    # Spark's hash aggregation: native's, and ours for fixed-width payloads (HashAggregatePartials).
    ("hash aggregation (native; ours: fixed-width payloads)", ("UnsafeFixedWidthAggregationMap", "BytesToBytesMap", "HashAggregateExec",
                                  "TungstenAggregationIterator", "AggregationIterator", "agg_FastHashMap",
                                  "RowBasedKeyValueBatch", "ObjectHashAggregate", "MergingSessionsExec")),
    ("sort (SortExec, external sorter)", ("UnsafeExternalSorter", "UnsafeInMemorySorter", "SortExec",
                                           "UnsafeExternalRowSorter", "RadixSort", "UnsafeSorterSpill",
                                           "GroupedIterator")),
    ("shuffle write/read, compression, block manager", (
        "org.apache.spark.shuffle.", "ShuffleExternalSorter", "UnsafeShuffleWriter", "SortShuffleWriter",
        "BypassMergeSortShuffleWriter", "util.collection.ExternalSorter", "ShuffleBlockFetcherIterator",
        "org.apache.spark.storage.", "net.jpountz.", "com.github.luben.zstd.", "org.xerial.snappy.",
        "io.netty.", "UnsafeRowSerializer", "org.apache.spark.io.")),
    ("parquet scan", ("org.apache.parquet.", "execution.datasources.parquet.", "FileScanRDD",
                      "vectorized.", "ColumnarBatch", "org.apache.hadoop.")),
    ("whole-stage codegen (fused scan/filter/project[/partial agg])", ("GeneratedIteratorForCodegenStage",
                                                                       "WholeStageCodegenExec")),
    ("codegen/compilation (Janino)", ("org.codehaus.janino.", "org.codehaus.commons.", "CodeGenerator")),
    ("driver: planning/analysis/optimizer", ("catalyst.rules.", "catalyst.analysis.", "catalyst.optimizer.",
                                             "QueryExecution", "execution.SparkStrategies",
                                             "catalyst.planning.", "IncrementalExecution", "catalyst.parser.")),
    ("driver: offsets/commit logs/progress", ("HDFSMetadataLog", "CheckpointFileManager", "OffsetSeqLog",
                                             "CommitLog", "ProgressReporter", "FileStreamSource",
                                             "FileStreamSourceLog", "CompactibleFileStreamLog")),
    ("scheduler/task launch/serialization", ("org.apache.spark.scheduler.", "org.apache.spark.executor.",
                                             "JavaSerializer", "KryoSerializer", "java.io.ObjectOutputStream",
                                             "java.io.ObjectInputStream", "ClosureCleaner")),
    ("py4j / Python gateway", ("py4j.",)),
]

# For samples in a state area: who asked (first frame from the leaf in one of these).
STATE_CALLERS = ("ValueStateImpl.", "MapStateImpl.", "ListStateImpl.", "StateStoreRestoreExec",
                 "StateStoreSaveExec", "StreamingAggregationStateManagerImplV2.",
                 "StreamingAggregationStateManagerImplV1.", "RocksDBStateStore.commit",
                 "RocksDBStateStore.iterator", "RocksDBStateStore.prefixScan",
                 "StateStoreRDD", "StatefulOperator", "TransformWithStateExec")


def short(f: str) -> str:
    parts = f.rsplit(".", 2)
    return ".".join(parts[-2:])


def state_caller(frames: List[str]) -> str:
    api = next((f for f in frames if any(c in f for c in STATE_CALLERS)), "?")
    ours = next((f for f in frames if f.startswith("io.github.keyedwatermarks.")), None)
    return short(api) + (" <- " + short(ours) if ours else "")


def frame_name(frame: dict) -> str:
    m = frame["method"]
    return f"{m['type']['name']}.{m['name']}".replace("/", ".")


THREAD_GROUPS = ("task threads", "stream execution (driver) thread", "other threads")


def thread_group(name: str) -> str:
    # JFR keeps a thread's first name: Spark's task threads show up as "Executor task idle
    # worker#N" or "Executor task launch worker ...".
    if name.startswith("Executor task"):
        return "task threads"
    if name.startswith("stream execution thread"):
        return "stream execution (driver) thread"
    return "other threads"


def area_of(frames: List[str]) -> str:
    for f in frames:  # leaf first
        for area, pats in AREAS:
            if any(p in f for p in pats):
                return area
    return "other"


def jfr_tool() -> str:
    found = shutil.which("jfr")
    if found:
        return found
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "jfr").exists():
        return str(Path(home) / "bin" / "jfr")
    raise SystemExit("jfr (JDK tool) not found: put $JAVA_HOME/bin on the PATH")


def load(path: Path) -> dict:
    out = subprocess.run(
        [jfr_tool(), "print", "--json", "--stack-depth", "1024", "--events",
         "jdk.ExecutionSample,jdk.NativeMethodSample,jdk.GarbageCollection", str(path)],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def _duration_ms(d) -> float:
    """JFR JSON durations are ISO-8601 ('PT0.012S') or numbers of nanoseconds."""
    if isinstance(d, (int, float)):
        return d / 1e6
    s = str(d)
    if not s.startswith("PT"):
        return 0.0
    total, num = 0.0, ""
    for ch in s[2:]:
        if ch.isdigit() or ch == ".":
            num += ch
        else:
            total += float(num or 0) * {"H": 3600e3, "M": 60e3, "S": 1e3}.get(ch, 0)
            num = ""
    return total


def summarise(path: Path, top: int, under: Sequence[str] = ()) -> dict:
    events = load(path)["recording"]["events"]
    by_area: Dict[str, float] = collections.Counter()
    by_thread: Dict[str, float] = collections.Counter()
    self_ms: Dict[str, float] = collections.Counter()
    total_ms: Dict[str, float] = collections.Counter()
    callers: Dict[str, float] = collections.Counter()
    under_ms: Dict[str, Dict[str, float]] = {u: collections.Counter() for u in under}
    gc_ms = 0.0
    truncated = n = 0
    for e in events:
        t, v = e["type"], e["values"]
        if t == "jdk.GarbageCollection":
            if v.get("cause") != "System.gc()":  # the harness's own GC before each run
                gc_ms += _duration_ms(v.get("sumOfPauses") or "0")
            continue
        st = v.get("stackTrace")
        if not st or not st.get("frames"):
            continue
        frames = [frame_name(f) for f in st["frames"]]
        if t == "jdk.NativeMethodSample":
            if not frames[0].startswith(NATIVE_CPU):
                continue
            w = NATIVE_WEIGHT_MS
        else:
            w = EXEC_WEIGHT_MS
        n += 1
        truncated += bool(st.get("truncated"))
        group = thread_group((v.get("sampledThread") or {}).get("javaName") or "")
        area = area_of(frames)
        by_thread[group] += w
        by_area[area] += w
        self_ms[frames[0]] += w
        if area.startswith("state:"):
            callers[state_caller(frames)] += w
        for f in set(frames):
            total_ms[f] += w
        for u in under:
            if any(u in f for f in frames):
                under_ms[u][group] += w
    return {"file": path.name, "samples": n, "truncated": truncated, "cpu_ms": sum(by_thread.values()),
            "gc_pause_ms": gc_ms, "under": under_ms, "by_thread": by_thread, "by_area": by_area,
            "self": self_ms.most_common(top), "state_callers": callers.most_common(top),
            "total": [(f, ms) for f, ms in total_ms.most_common(top * 8)
                      if not f.startswith(("java.", "scala.", "jdk.", "sun."))][:top]}


def pct(x: float, total: float) -> str:
    return f"{100 * x / total:.1f}%" if total else "–"


def under_table(summaries: List[dict], under: Sequence[str], batches: Optional[List[int]]) -> List[str]:
    """CPU sampled under each --under frame, by thread group (ms, and ms per micro-batch)."""
    names = [s["file"].removesuffix(".jfr") for s in summaries]
    unit = "ms per micro-batch" if batches else "ms"
    lines = ["## Under a frame (inclusive, " + unit + ")", "",
             "| frame | thread group | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
    for u in under:
        for g in THREAD_GROUPS:
            ms = [s["under"][u].get(g, 0.0) for s in summaries]
            if any(ms):
                cells = [f"{m / b:.2f}" for m, b in zip(ms, batches)] if batches else [f"{m:,.0f}" for m in ms]
                lines.append(f"| `{u}` | {g} | " + " | ".join(cells) + " |")
    return lines + [""]


def report(summaries: List[dict], under: Sequence[str] = (), batches: Optional[List[int]] = None) -> str:
    names = [s["file"].removesuffix(".jfr") for s in summaries]
    lines = ["# JFR summary", "", "## Areas (share of sampled CPU, all threads)", "",
             "| area | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    areas = sorted({a for s in summaries for a in s["by_area"]},
                   key=lambda a: -max(s["by_area"].get(a, 0) / max(s["cpu_ms"], 1) for s in summaries))
    for a in areas:
        lines.append(f"| {a} | " + " | ".join(pct(s["by_area"].get(a, 0), s["cpu_ms"]) for s in summaries) + " |")
    lines += ["| **sampled CPU s** | " + " | ".join(f"{s['cpu_ms'] / 1000:.1f}" for s in summaries) + " |",
              "| samples (truncated stacks) | " + " | ".join(f"{s['samples']} ({s['truncated']})" for s in summaries) + " |",
              "| GC pauses s (not System.gc()) | " + " | ".join(f"{s['gc_pause_ms'] / 1000:.2f}" for s in summaries) + " |",
              "", "## Threads (share of sampled CPU)", "",
              "| thread group | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for g in THREAD_GROUPS:
        lines.append(f"| {g} | " + " | ".join(pct(s["by_thread"].get(g, 0), s["cpu_ms"]) for s in summaries) + " |")
    lines.append("")
    if under:
        lines += under_table(summaries, under, batches)
    for s in summaries:
        lines += [f"## {s['file']}", "", "Top self (leaf) methods:", "", "| ms | share | method |", "|---:|---:|---|"]
        lines += [f"| {ms:,.0f} | {pct(ms, s['cpu_ms'])} | `{f}` |" for f, ms in s["self"]]
        lines += ["", "State areas by caller (state API or operator frame <- our innermost frame):", "",
                  "| ms | share | caller |", "|---:|---:|---|"]
        lines += [f"| {ms:,.0f} | {pct(ms, s['cpu_ms'])} | `{f}` |" for f, ms in s["state_callers"]]
        lines += ["", "Top total (inclusive) methods, outside java./scala./jdk.:", "",
                  "| ms | share | method |", "|---:|---:|---|"]
        lines += [f"| {ms:,.0f} | {pct(ms, s['cpu_ms'])} | `{f}` |" for f, ms in s["total"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recordings", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--out", type=Path, default=None, help="also write the markdown here")
    p.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    p.add_argument("--under", action="append", default=[], metavar="FRAME",
                   help="also the CPU under frames whose name contains FRAME (repeatable)")
    p.add_argument("--batches", type=int, nargs="+", default=None, metavar="N",
                   help="micro-batches each recording covers (one for all, or one per recording): "
                        "--under's table in ms per micro-batch")
    args = p.parse_args(argv)
    if args.batches is not None:
        if len(args.batches) not in (1, len(args.recordings)):
            p.error(f"--batches takes one N or one per recording ({len(args.recordings)}), got {len(args.batches)}")
        if min(args.batches) < 1:
            p.error(f"--batches must be at least 1, got {min(args.batches)}")
        if len(args.batches) == 1:
            args.batches = args.batches * len(args.recordings)
    summaries = [summarise(r, args.top, args.under) for r in args.recordings]
    md = report(summaries, args.under, args.batches)
    print(md)
    if args.out:
        args.out.write_text(md)
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
