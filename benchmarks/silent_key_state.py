"""What a silent key costs in the state store: keyed-watermarks next to Spark's own windowed
aggregation, from RocksDB's own metrics (the state operator's progress: rows in state and the
size of its SST files after a snapshot).

Usage: .venv/bin/python benchmarks/silent_key_state.py [--keys N] [--out FILE]

Each key sends rows in one micro-batch, then falls silent; other keys' later rows keep the query
going (and move Spark's global watermark). Bytes per silent key = (SST bytes with the N silent
keys - SST bytes of the same query with none) / N, at three points:
  open     after the keys' batch: each key's windows still open;
  closed   the key's own window closed (its next row moved its watermark past it) and it
           sends nothing more: keyed-watermarks keeps its watermark record, Spark's global
           watermark closes the key's window only when the global watermark passes it;
  idle     keyed with idle_timeout: the idle key's window was emitted by its timer; the
           key keeps only its record until it is forgotten (idle_timeout again).
Spark's aggregation keeps (key, window) rows until the global watermark passes the window, then
nothing. Results: benchmarks/results/silent_key_state.md (the table printed).
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import tempfile
import time
from pathlib import Path

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
BASE_S = 1_704_067_200
SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"


def ts(s: float):
    return EPOCH + datetime.timedelta(seconds=BASE_S + s)


def session():
    from pyspark.sql import SparkSession

    import keyed_watermarks as kw

    builder = (SparkSession.builder.master("local[2]").appName("silent-key-state")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               # A full snapshot per batch: the SST size is the whole state.
               .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "false")
               # Compacted at each commit: deleted and overwritten rows (tombstones, old
               # versions) leave the SST files, which then hold only the live state.
               .config("spark.sql.streaming.stateStore.rocksdb.compactOnCommit", "true")
               .config("spark.driver.memory", "2g"))
    s = kw.configure(builder).getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


class Run:
    """One streaming query over a directory of files, one file per micro-batch."""

    def __init__(self, spark, root: Path, build, processing_time: bool = False):
        self.spark, self.root, self.build, self.n = spark, root, build, 0
        # A processing-time query (idle_timeout) always has another no-data batch to run, so
        # availableNow would never end: it runs one micro-batch a start instead.
        self.processing_time = processing_time
        (root / "in").mkdir(parents=True)

    def batch(self, rows) -> dict:
        self.spark.createDataFrame(rows, SCHEMA).coalesce(1).write.parquet(str(self.root / "in" / f"b{self.n:04d}"))
        self.n += 1
        events = (self.spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                  .parquet(str(self.root / "in" / "*")))
        writer = (self.build(events).writeStream.format("noop").outputMode("append")
                  .option("checkpointLocation", str(self.root / "ckpt")))
        q = (writer.trigger(once=True) if self.processing_time else writer.trigger(availableNow=True)).start()
        q.awaitTermination()
        if q.exception():
            raise q.exception()
        op = q.lastProgress["stateOperators"][0]
        return {"rows": op["numRowsTotal"], "sst": int(op["customMetrics"].get("rocksdbSstFileSize", 0))}


def keyed(idle: bool):
    import keyed_watermarks as kw
    from pyspark.sql import functions as F

    def build(events):
        return (kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds",
                                   idle_timeout="2 seconds" if idle else None,
                                   idle_clock="processing_time" if idle else None)
                .window("10 seconds").agg(F.count("*").alias("n"), F.avg("temp").alias("mean")))
    return build


def native(events):
    from pyspark.sql import functions as F

    return (events.withWatermark("ts", "5 seconds").groupBy("device", F.window("ts", "10 seconds"))
            .agg(F.count("*").alias("n"), F.avg("temp").alias("mean")))


def scenario(spark, root: Path, build, silent: int, idle: bool = False) -> dict:
    """`silent` keys send two rows 30 s apart (their first window closes, the second stays
    open), then nothing; key "busy" keeps sending, moving the global watermark on."""
    run = Run(spark, root, build, processing_time=idle)
    run.batch([("busy", ts(0), 1.0)])
    keys = [(f"k{i:07d}", ts(1), 1.0) for i in range(silent)]
    at = {"open": run.batch(keys + [("busy", ts(1), 1.0)])}
    at["closed"] = run.batch([(k, ts(31), 1.0) for k, _, _ in keys] + [("busy", ts(31), 1.0)])
    # The busy key moves on: Spark's global watermark passes the silent keys' windows.
    at["passed"] = run.batch([("busy", ts(120), 1.0)])
    if idle:
        time.sleep(5)  # past idle_timeout: the silent keys' timers emit their windows
        at["idle"] = run.batch([("busy", ts(121), 1.0)])
    return at


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    spark = session()
    tmp = Path(tempfile.mkdtemp(prefix="silent-keys-"))
    results = {}
    try:
        for name, build, idle in (("keyed", keyed(False), False), ("keyed, idle_timeout", keyed(True), True),
                                  ("Spark groupBy(window)", native, False)):
            base = scenario(spark, tmp / f"{len(results)}-base", build, 0, idle)
            with_keys = scenario(spark, tmp / f"{len(results)}-keys", build, args.keys, idle)
            results[name] = {p: (with_keys[p]["rows"] - base[p]["rows"],
                                 (with_keys[p]["sst"] - base[p]["sst"]) / args.keys) for p in with_keys}
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    import pyspark

    lines = [f"Silent keys: {args.keys:,}, Spark {pyspark.__version__}, RocksDB SST bytes (LZ4-compressed "
             "blocks, a full snapshot per batch) per silent key, and the state rows they add.", "",
             "| query | point | state rows added | SST bytes per silent key |", "|---|---|---|---|"]
    for name, points in results.items():
        for p, (rows, per_key) in points.items():
            lines.append(f"| {name} | {p} | {rows:,} | {per_key:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
