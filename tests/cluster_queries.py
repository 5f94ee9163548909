"""Runs the same keyed-watermark queries on a given Spark master, for tests/test_cluster.py.

    python tests/cluster_queries.py MASTER WORK_DIR

Generates a seeded stream under WORK_DIR/input (one parquet file per micro-batch, the same
files for every master), then runs tumbling, sliding and session windows, a timer policy
(max_skew: Spark's event-time timers close silent keys' windows) and a restart from the
checkpoint (half of the files, stop, all of them), each into WORK_DIR/<master-tag>/<name> as
parquet. A separate process per master: one JVM holds one SparkContext (tests/test_cluster.py
runs the local[2] side in its own session, through run_all).
"""

from __future__ import annotations

import datetime
import os
import random
import sys
from pathlib import Path

from pyspark.sql import SparkSession, functions as F

import keyed_watermarks as kw

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"
BATCHES, HALF = 6, 3  # each micro-batch runs twice per query (local[2], local-cluster): kept few
EPOCH = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)


def write_input(spark: SparkSession, directory: Path) -> None:
    if directory.exists():
        return
    rng = random.Random(5)
    clock = {f"d{i}": 0.0 for i in range(12)}
    tmp = directory.parent / "tmp-input"
    for b in range(BATCHES):
        rows = []
        for _ in range(40):
            d = rng.choice(sorted(clock)[: 4 + b])  # keys join over time; early ones go quiet
            clock[d] += rng.uniform(0, 6)
            t = clock[d] - (rng.uniform(0, 20) if rng.random() < 0.2 else 0)
            rows.append((d, EPOCH + datetime.timedelta(seconds=t), float(rng.randint(0, 40))))
        spark.createDataFrame(rows, SCHEMA).coalesce(1).write.mode("overwrite").parquet(str(tmp))
        (part,) = [p for p in tmp.iterdir() if p.name.endswith(".parquet")]
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / f"batch-{b:03d}.parquet"
        part.rename(target)
        os.utime(target, (1_000_000 + b, 1_000_000 + b))


def queries():
    aggs = [F.count("*").alias("n"), F.sum("temp").alias("s"), F.sort_array(F.collect_list("temp")).alias("temps")]

    def keyed(events, **options):
        return kw.keyed_watermark(events, key="device", event_time="ts", lateness="3 seconds", **options)

    return {
        "tumbling": lambda e: keyed(e).window("10 seconds").agg(*aggs),
        "sliding": lambda e: keyed(e).window("10 seconds", slide="5 seconds").agg(*aggs),
        "session": lambda e: keyed(e).session("4 seconds").agg(*aggs),
        "timers": lambda e: keyed(e, max_skew="5 seconds").window("10 seconds").agg_with_report(*aggs),
        "restart": lambda e: keyed(e).window("10 seconds").agg_with_report(*aggs),
    }


def run(spark: SparkSession, build, source: Path, out: Path, checkpoint: Path, max_files: int = 1) -> None:
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", max_files).parquet(str(source))
    query = (build(events).writeStream.format("parquet").outputMode("append").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception():
        raise query.exception()


def main(master: str, work: Path) -> None:
    spark = kw.configure(SparkSession.builder.master(master).appName("kw-cluster")
                         .config("spark.sql.shuffle.partitions", "2")
                         .config("spark.ui.enabled", "false")
                         .config("spark.sql.session.timeZone", "UTC")
                         .config("spark.executor.memory", "768m")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    run_all(spark, "cluster" if master.startswith("local-cluster") else "local", work)
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    print("EXECUTORS", executors)
    spark.stop()


def run_all(spark: SparkSession, tag: str, work: Path) -> None:
    """Every query over WORK_DIR/input (written first if missing) into WORK_DIR/<tag>/<name>.
    tests/test_cluster.py also calls it in-process for the local[2] run, on its own session."""
    write_input(spark, work / "input")
    base = work / tag
    for name, build in queries().items():
        if name != "restart":
            run(spark, build, work / "input", base / name, base / f"{name}-checkpoint")
            continue
        # Restart: the first half of the files, stop, then all of them from the checkpoint.
        half = work / f"{tag}-half-input"
        half.mkdir(parents=True, exist_ok=True)
        files = sorted((work / "input").glob("*.parquet"))
        for f in files[:HALF]:
            os.link(f, half / f.name)
        run(spark, build, half, base / name, base / f"{name}-checkpoint")
        for f in files[HALF:]:
            os.link(f, half / f.name)
        run(spark, build, half, base / name, base / f"{name}-checkpoint")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
