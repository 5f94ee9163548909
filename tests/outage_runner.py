"""The outage scenario of issue 39: a fleet whose query is down for a while, then catches up.

    python tests/outage_runner.py wall-clock|arrival --root DIR [--scale 1.0] [--files 30] [--out result.json]
    python tests/outage_runner.py stop-in-foreach-batch --root DIR

The fleet (``fleet_files``): 12 devices, 8 that send one row per second of event time and 4
uploaders that send their last 6 seconds every 6 seconds; one file every 2 seconds of arrival
time, each row's event time that of its device's clock (no clock offsets). The query:
10-second tumbling windows per device, ``count(*)`` as ``n``, ``lateness="2 seconds"``, append
to a parquet sink, so every emission of a window stays in the output (``Run.windows``).

Two ways to run it:

- **On the arrival clock** (``run_files``, no waiting): each file gets its arrival time as its
  modification time (``os.utime``), which the file source orders by and exposes as
  ``_metadata.file_modification_time``. "Live" is one file per micro-batch; "down, then catching
  up" is the query stopped after file ``down_after`` while the later files are written, then
  restarted from its checkpoint with ``maxFilesPerTrigger`` (several small batches, or all of
  the backlog in one). ``Trigger.AvailableNow`` runs each part to its end.
- **On the query's wall clock** (``wall_clock_run``, real time, ``idle_clock="processing_time"``): files written every 2
  seconds (times ``scale``) by a thread while the query runs with
  ``trigger(processingTime="2 seconds")`` and ``idle_timeout="8 seconds"``; with ``down`` the
  query is stopped after the file ``down_after`` was processed and restarted ``down`` seconds
  later. The CLI prints a JSON result and leaves Spark's log on stderr (for the test of the
  broadcast error).

``compare`` reports, window by window, what one run has that another lacks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

SECOND_S = 1
STEADY = [f"d{i:02d}" for i in range(8)]
UPLOADERS = [f"u{i}" for i in range(4)]
DEVICES = STEADY + UPLOADERS
# Event and arrival times: seconds after this instant (2024-01-01T00:00:00Z, window-aligned).
T0 = 1_704_067_200
SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"

Window = Tuple[str, int]  # (device, window start in seconds after T0)


def fleet_files(n_files: int, file_every: int = 2, upload_every: int = 6,
                stop: Optional[Dict[str, int]] = None) -> List[Tuple[int, List[Tuple[str, int]]]]:
    """The fleet's files in arrival order: (arrival second, [(device, event second)]).

    File i arrives at second ``file_every * (i + 1)`` and holds each steady device's rows of
    the seconds [previous file, this file), and, when its arrival second is a multiple of
    ``upload_every``, each uploader's rows of the last ``upload_every`` seconds. ``stop`` maps a
    device to the second after which it sends nothing (a device that goes silent)."""
    stop = stop or {}
    files = []
    for i in range(n_files):
        t = file_every * (i + 1)
        rows = []
        for d in STEADY:
            rows += [(d, s) for s in range(t - file_every, t)]
        if t % upload_every == 0:
            for d in UPLOADERS:
                rows += [(d, s) for s in range(t - upload_every, t)]
        rows = [(d, s) for d, s in rows if s <= stop.get(d, s)]
        files.append((t, rows))
    return files


def iso(second: int) -> str:
    return dt.datetime.fromtimestamp(T0 + second, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000000Z")


def write_file(input_dir: Path, i: int, arrival: int, rows: Sequence[Tuple[str, int]],
               mtime: Optional[float] = None) -> Path:
    """One JSON-lines file; its modification time is ``mtime`` (default: T0 + arrival)."""
    input_dir.mkdir(parents=True, exist_ok=True)
    target = input_dir / f"file-{i:05d}.json"
    tmp = input_dir / f".file-{i:05d}.json.tmp"  # hidden: the file source skips dot files
    with open(tmp, "w") as f:
        for d, s in rows:
            f.write(json.dumps({"device": d, "ts": iso(s), "temp": float(s % 7)}) + "\n")
    if mtime is None:
        mtime = T0 + arrival
    os.utime(tmp, (mtime, mtime))
    os.replace(tmp, target)
    return target


@dataclass
class Run:
    """What a run's sink holds: every emitted window row, in order of output files."""

    rows: List[Tuple[str, int, int]] = field(default_factory=list)  # (device, start s, n)

    @property
    def windows(self) -> Counter:
        return Counter((d, s) for d, s, _ in self.rows)

    def counts(self) -> Dict[Window, List[int]]:
        out: Dict[Window, List[int]] = {}
        for d, s, n in self.rows:
            out.setdefault((d, s), []).append(n)
        return out

    def table(self) -> Dict[str, object]:
        return {"window_rows": len(self.rows),
                "each_window_once": all(c == 1 for c in self.windows.values())}


def compare(live: Run, other: Run) -> Dict[str, object]:
    """Window by window: missing from ``other``, extra in it, emitted more than once, and
    windows (emitted once in both) whose counts differ."""
    a, b = live.counts(), other.counts()
    return {
        "missing": sorted(w for w in a if w not in b),
        "extra": sorted(w for w in b if w not in a),
        "twice": sorted((w, b[w]) for w in b if len(b[w]) > 1),
        "counts_differ": sorted((w, a[w], b[w]) for w in a if w in b and a[w] != b[w]),
    }


def read_run(spark, out_dir: Path) -> Run:
    if not Path(out_dir).exists():
        return Run()
    df = spark.read.schema("device STRING, window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, n BIGINT") \
        .parquet(str(out_dir))
    rows = df.selectExpr("device", "unix_seconds(window.start) AS s", "n").collect()
    return Run(sorted((r.device, r.s - T0, r.n) for r in rows))


def keyed_query(spark, input_dir: Path, max_files: Optional[int], report: bool = False, **options):
    """The issue's query over the JSON files of ``input_dir``; ``options`` go to
    ``kw.keyed_watermark`` (e.g. ``idle_timeout``)."""
    import keyed_watermarks as kw
    from pyspark.sql import functions as F

    reader = spark.readStream.schema(SCHEMA)
    if max_files is not None:
        reader = reader.option("maxFilesPerTrigger", max_files)
    events = reader.json(str(input_dir))
    if options.pop("with_arrival_column", False):
        events = events.withColumn("arrival", F.col("_metadata.file_modification_time"))
    windows = (kw.keyed_watermark(events, key="device", event_time="ts", lateness="2 seconds", **options)
            .window("10 seconds"))
    n = F.count("*").alias("n")
    return windows.agg_with_report(n) if report else windows.agg(n)


def start(df, out_dir: Path, checkpoint: Path, trigger: Dict[str, object]):
    return (df.writeStream.format("parquet").outputMode("append")
            .option("path", str(out_dir)).option("checkpointLocation", str(checkpoint))
            .trigger(**trigger).start())


def run_to_end(query) -> None:
    query.awaitTermination()
    if query.exception() is not None:
        raise query.exception()


# --------------------------------------------------------------------------------------
# The arrival clock: no waiting
# --------------------------------------------------------------------------------------


def run_files(spark, root: Path, files, options: Dict[str, object], down_after: Optional[int] = None,
              catch_up_files: Optional[int] = 1) -> Run:
    """Runs the query over ``files`` on ``Trigger.AvailableNow``: live (one file per batch), or,
    with ``down_after``, stopped after that file and restarted from its checkpoint when all
    later files are written, catching up ``catch_up_files`` files per batch (None: all)."""
    root.mkdir(parents=True, exist_ok=True)
    input_dir, out, ckpt = root / "input", root / "out", root / "checkpoint"
    first = files if down_after is None else files[: down_after + 1]
    for i, (t, rows) in enumerate(first):
        write_file(input_dir, i, t, rows)
    run_to_end(start(keyed_query(spark, input_dir, 1, **dict(options)), out, ckpt, {"availableNow": True}))
    if down_after is not None:
        for i, (t, rows) in enumerate(files[down_after + 1:], start=down_after + 1):
            write_file(input_dir, i, t, rows)
        max_files = catch_up_files if catch_up_files is not None else len(files)
        run_to_end(start(keyed_query(spark, input_dir, max_files, **dict(options)), out, ckpt,
                         {"availableNow": True}))
    return read_run(spark, out)


# --------------------------------------------------------------------------------------
# The wall clock: real time
# --------------------------------------------------------------------------------------


class Writer(threading.Thread):
    """Writes file i at ``start + scale * arrival(i)`` of wall time (modification time: now)."""

    def __init__(self, input_dir: Path, files, scale: float, t_start: float) -> None:
        super().__init__(daemon=True)
        self.input_dir, self.files, self.scale, self.t_start = input_dir, files, scale, t_start
        self.written = 0

    def run(self) -> None:
        for i, (t, rows) in enumerate(self.files):
            delay = self.t_start + self.scale * t - time.time()
            if delay > 0:
                time.sleep(delay)
            write_file(self.input_dir, i, t, rows, mtime=time.time())
            self.written = i + 1


def rows_processed(query, seen: Dict[int, int]) -> int:
    for p in query.recentProgress:
        seen[p["batchId"]] = p["numInputRows"]
    return sum(seen.values())


def wall_clock_run(spark, root: Path, files, scale: float = 1.0, down: Optional[float] = None,
                   down_after: int = 9, log: Callable[[str], None] = lambda s: None,
                   **options) -> Run:
    """The issue's run on the query's wall clock: ``idle_timeout`` (``options``) decides on the
    processing time between micro-batches. Returns when every file was processed and the last
    windows had time to close on ``idle_timeout``."""
    input_dir, out, ckpt = root / "input", root / "out", root / "checkpoint"
    input_dir.mkdir(parents=True, exist_ok=True)
    trigger = {"processingTime": f"{int(2000 * scale)} milliseconds"}
    total = sum(len(r) for _, r in files)
    before_down = sum(len(r) for _, r in files[: down_after + 1])
    writer = Writer(input_dir, files, scale, time.time())
    writer.start()
    seen: Dict[int, int] = {}
    query = start(keyed_query(spark, input_dir, None, **dict(options)), out, ckpt, trigger)
    if down is not None:
        while rows_processed(query, seen) < before_down:
            time.sleep(0.05 * scale)
            if query.exception() is not None:
                raise query.exception()
        query.stop()
        log(f"down after {rows_processed(query, seen)} rows, file {writer.written - 1} written")
        time.sleep(down * scale)
        seen_before = sum(seen.values())
        seen = {}
        query = start(keyed_query(spark, input_dir, None, **dict(options)), out, ckpt, trigger)
        log("restarted")
    else:
        seen_before = 0
    while seen_before + rows_processed(query, seen) < total:
        time.sleep(0.1)
        if query.exception() is not None:
            raise query.exception()
    # The silent keys' last windows close on idle_timeout (8 s) and a later batch.
    time.sleep(12 * scale)
    query.stop()
    writer.join()
    return read_run(spark, out)


def stop_in_foreach_batch(spark, root: Path, log: Callable[[str], None]) -> None:
    """Stops a query while its ``kw.foreach_batch`` writer runs a Spark job (as an outage that
    begins mid-batch does): Spark cancels the job, the writer's call fails in Python, and Spark
    decides from the error Python returns whether the failure was the stop's."""
    import keyed_watermarks as kw

    files = fleet_files(4)
    for i, (t, rows) in enumerate(files):
        write_file(root / "input", i, t, rows)
    writing = threading.Event()

    def results(df, batch_id: int) -> None:
        df.write.mode("append").parquet(str(root / "out"))
        writing.set()
        # A job that outlasts the stop: Spark cancels it, the call below raises.
        df.sparkSession.sql("SELECT reflect('java.lang.Thread', 'sleep', CAST(60000 AS BIGINT))").collect()

    df = keyed_query(spark, root / "input", 1, report=True)
    query = (df.writeStream.foreachBatch(kw.foreach_batch(results=results))
             .option("checkpointLocation", str(root / "checkpoint")).start())
    if not writing.wait(600):
        raise RuntimeError(f"the first batch did not reach its writer: {query.exception()}")
    time.sleep(1)
    log("stopping the query mid-batch")
    query.stop()
    log(f"stopped; exception: {query.exception()}")


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["wall-clock", "arrival", "stop-in-foreach-batch"])
    p.add_argument("--root", required=True)
    p.add_argument("--scale", type=float, default=1.0, help="wall time per second of arrival time")
    p.add_argument("--files", type=int, default=30)
    p.add_argument("--down", type=float, default=20.0, help="seconds (times scale) the query is down")
    p.add_argument("--down-after", type=int, default=9)
    p.add_argument("--out", help="write the JSON result here (default: stdout)")
    args = p.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from pyspark.sql import SparkSession

    import keyed_watermarks as kw

    spark = kw.configure(
        SparkSession.builder.master("local[2]").appName("outage-runner")
        .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
    ).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    root = Path(args.root)

    def log(s: str) -> None:
        print(f"[outage-runner {time.strftime('%H:%M:%S')}] {s}", file=sys.stderr, flush=True)

    if args.mode == "stop-in-foreach-batch":
        stop_in_foreach_batch(spark, root, log)
        time.sleep(2)  # the stream thread's last words reach stderr
        spark.stop()
        return
    files = fleet_files(args.files)
    if args.mode == "arrival":
        # The table on the arrival clock (no waiting): live, and down after file
        # down_after then caught up one file per batch, and in one batch.
        options = {"arrival_time": "arrival", "with_arrival_column": True, "idle_timeout": "8 seconds"}
        live = run_files(spark, root / "live", files, options)
        small = run_files(spark, root / "small", files, options, down_after=args.down_after, catch_up_files=1)
        big = run_files(spark, root / "big", files, options, down_after=args.down_after, catch_up_files=None)
        result = {"live": {**live.table(), "rows": live.rows},
                  "down_small_batches": {**small.table(), "compare": compare(live, small)},
                  "down_one_batch": {**big.table(), "compare": compare(live, big)}}
        text = json.dumps(result)
        Path(args.out).write_text(text) if args.out else print(text)
        spark.stop()
        return
    idle = f"{int(8000 * args.scale)} milliseconds"

    import inspect

    options = {"idle_timeout": idle}
    if "idle_clock" in inspect.signature(kw.keyed_watermark).parameters:
        options["idle_clock"] = "processing_time"  # the wall clock, by name
    log("live run")
    live = wall_clock_run(spark, root / "live", files, args.scale, log=log, **options)
    log("down-then-catch-up run")
    down = wall_clock_run(spark, root / "down", files, args.scale, down=args.down,
                          down_after=args.down_after, log=log, **options)
    result = {"live": {**live.table(), "rows": live.rows}, "down": {**down.table(), "rows": down.rows},
              "compare": compare(live, down)}
    text = json.dumps(result)
    if args.out:
        Path(args.out).write_text(text)
    else:
        print(text)
    spark.stop()


if __name__ == "__main__":
    main()
