#!/usr/bin/env python
"""Kafka -> per-device (keyed) event-time windows -> Kafka, in Spark's real-time mode.

One streaming query reads a Kafka topic (key = device id, value = JSON ``{"ts": ..., "temp":
...}``), aggregates per-device tumbling windows with ``kw.keyed_watermark(..., real_time=True)``
and writes each window to another Kafka topic (key = device, value = JSON of the window's
row), with ``trigger(realTime=...)`` and ``outputMode("update")``. A device's window is written
by the row that moves the device's watermark past the window's end, while the real-time batch
runs, not at its end (docs/semantics.md, "Real-time mode"; docs/real-time.md).

What real-time mode needs (Spark 4.3):

- a Kafka source and a Kafka (or foreach) sink, ``outputMode("update")``;
- as many task slots as source partitions plus shuffle partitions: ``local[4]`` for a topic of
  2 partitions and ``spark.sql.shuffle.partitions=2`` (else Spark refuses the query with
  CONCURRENT_SCHEDULER_INSUFFICIENT_SLOT);
- Spark's Kafka connector: there is no ``spark-sql-kafka-0-10_2.13`` 4.3.0 on Maven Central,
  and the 4.2.0 connector runs on Spark 4.3 in real-time mode (``--kafka-package``).

Example (a broker from ``dev/kafka start``; topics created with 2 and 1 partitions)::

    python examples/kafka_real_time.py --bootstrap-servers 127.0.0.1:9092 \\
        --input-topic iot-events --output-topic iot-windows --checkpoint out/rtm/checkpoint

Stops on SIGTERM or SIGINT (``--run-for`` seconds, if given).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Optional, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

import keyed_watermarks as kw

REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
VALUE_SCHEMA = "ts TIMESTAMP, temp DOUBLE"


def build_session(master: str = "local[4]", kafka_package: str = KAFKA_PACKAGE,
                  shuffle_partitions: int = 2) -> SparkSession:
    """A local session with our jar and Spark's Kafka connector (resolved by Ivy from Maven
    Central through dev/ivysettings.xml). ``master`` needs a task slot per source partition
    plus one per shuffle partition."""
    builder = (
        SparkSession.builder.master(master)
        .appName("keyed-watermarks-kafka-real-time")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.jars.ivySettings", str(REPO_ROOT / "dev" / "ivysettings.xml"))
        .config("spark.jars.packages", kafka_package)
    )
    spark = kw.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def kafka_events(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """The topic as events: device (the message key), ts and temp from the JSON value."""
    raw = (spark.readStream.format("kafka")
           .option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", topic)
           .option("startingOffsets", "earliest")
           .load())
    parsed = F.from_json(F.col("value").cast("string"), VALUE_SCHEMA)
    return raw.select(F.col("key").cast("string").alias("device"), parsed["ts"].alias("ts"),
                      parsed["temp"].alias("temp"))


def keyed_windows(events: DataFrame, lateness: str, window: str) -> DataFrame:
    """Per-device tumbling windows, closed row by row: ``real_time=True``."""
    return (kw.keyed_watermark(events, key="device", event_time="ts", lateness=lateness, real_time=True)
            .window(window)
            .agg(F.count("*").alias("n"), F.sum("temp").alias("sum_temp"), F.max("temp").alias("max_temp")))


def to_kafka(windows: DataFrame) -> DataFrame:
    """key = device, value = the window's row as JSON (window bounds in microseconds)."""
    return windows.select(
        F.col("device").alias("key"),
        F.to_json(F.struct(
            "device",
            F.unix_micros(F.col("window.start")).alias("start_us"),
            F.unix_micros(F.col("window.end")).alias("end_us"),
            "n", "sum_temp", "max_temp")).alias("value"))


def start(spark: SparkSession, bootstrap: str, input_topic: str, output_topic: str, checkpoint: str,
          lateness: str = "5 seconds", window: str = "10 seconds", batch: str = "5 minutes") -> StreamingQuery:
    """Starts the query: Kafka -> keyed windows -> Kafka, trigger(realTime=batch)."""
    out = to_kafka(keyed_windows(kafka_events(spark, bootstrap, input_topic), lateness, window))
    return (out.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", output_topic)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")
            .trigger(realTime=batch)
            .start())


def stop_process(proc: subprocess.Popen, timeout_s: float = 120) -> None:
    """Stops a pipeline run in a process of its own (``main``, started with
    ``start_new_session=True``): SIGTERM to its Python process (``main`` stops the query, then
    Spark), SIGKILL to its process group if it has not ended within ``timeout_s``. Not SIGTERM
    to the group: the Spark JVM (in that group) would stop at once, under the running query."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--input-topic", required=True)
    p.add_argument("--output-topic", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--lateness", default="5 seconds")
    p.add_argument("--window", default="10 seconds")
    p.add_argument("--batch", default="5 minutes", help="the real-time batch duration (checkpoint interval)")
    p.add_argument("--master", default="local[4]")
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--kafka-package", default=KAFKA_PACKAGE)
    p.add_argument("--run-for", type=float, default=None, help="stop after this many seconds")
    args = p.parse_args(argv)
    spark = build_session(args.master, args.kafka_package, args.shuffle_partitions)
    query = start(spark, args.bootstrap_servers, args.input_topic, args.output_topic, args.checkpoint,
                  args.lateness, args.window, args.batch)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"started {query.id}", flush=True)
    stop.wait(args.run_for)
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
