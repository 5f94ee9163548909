"""Keyed-watermark queries for tests/test_kill_recovery.py, run as their own process so the test
can kill them with SIGKILL at any moment:

    python tests/kill_queries.py INPUT WORK TRIGGER

Two queries over the same input, side by side in one JVM (one Spark start-up for both), each
with its checkpoint and output under ``WORK/<variant>``:

- ``parquet-on``: Spark's file sink (exactly once through its metadata log), RocksDB changelog
  checkpointing on;
- ``foreach-off``: ``foreachBatch`` writing each micro-batch to ``out/batch=<id>`` with
  ``overwrite`` (a re-run micro-batch replaces its own output), full snapshots (changelog off).

A streaming query runs on a copy of the session's conf taken when it starts, so each query keeps
the changelog setting that was set just before its ``start()``. TRIGGER is ``continuous`` (one
micro-batch after another until killed) or ``available`` (all available input, then exit).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark.sql import SparkSession, functions as F

import keyed_watermarks as kw

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
VARIANTS = {"parquet-on": ("parquet", "true"), "foreach-off": ("foreach", "false")}


def start(spark, variant: str, source: str, work: Path, trigger: str):
    sink, changelog = VARIANTS[variant]
    spark.conf.set(CHANGELOG, changelog)
    out, checkpoint = str(work / variant / "out"), str(work / variant / "checkpoint")
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(source)
    result = (kw.keyed_watermark(events, key="device", event_time="ts", lateness="2 seconds")
              .window("10 seconds")
              .agg(F.count("*").alias("n"), F.sum("temp").alias("s")))
    writer = result.writeStream.outputMode("append").option("checkpointLocation", checkpoint)
    if sink == "parquet":
        writer = writer.format("parquet").option("path", out)
    else:
        writer = writer.foreachBatch(
            lambda df, batch_id: df.write.mode("overwrite").parquet(f"{out}/batch={batch_id}"))
    if trigger == "available":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="0 seconds")
    return writer.queryName(variant).start()


def main(source: str, work: str, trigger: str) -> None:
    spark = kw.configure(SparkSession.builder.master("local[2]").appName("kw-kill")
                         .config("spark.sql.shuffle.partitions", "2")
                         .config("spark.ui.enabled", "false")
                         .config("spark.sql.session.timeZone", "UTC")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    queries = [start(spark, variant, source, Path(work), trigger) for variant in VARIANTS]
    print("STARTED", flush=True)
    for query in queries:
        query.awaitTermination()
        if query.exception():
            raise query.exception()


if __name__ == "__main__":
    main(*sys.argv[1:4])
