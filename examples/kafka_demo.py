#!/usr/bin/env python
"""The IoT demo on Kafka and Delta: Spark's global watermark vs keyed watermarks.

1. Replays the demo's seeded stream (examples/iot_producer.py) into a Kafka topic.
2. Runs the pipeline of examples/kafka_to_delta.py (keyed windows + dead letter, to Delta).
3. Runs Spark's own global-watermark aggregation over the same topic, with the same micro-
   batches (both queries use ``Trigger.AvailableNow`` and the same ``maxOffsetsPerTrigger``
   over the same, complete topic, so Spark's Kafka source cuts identical offset ranges),
   into a third Delta table.
4. Prints a few rows of the Delta tables and the demo's accuracy table (``iot_demo``'s own
   metrics and report), where a micro-batch's "arrival" is the latest simulated arrival time
   among its messages.

Start a broker first (``dev/kafka start``); ``dev/kafka demo`` runs this with the Spark 4.2
virtualenv and that broker.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import iot_demo  # noqa: E402
import iot_producer  # noqa: E402
import kafka_to_delta  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_global(spark, args) -> None:
    """Spark's global watermark over the same topic and batches, to a Delta table."""
    events = kafka_to_delta.kafka_events(spark, args).where("device IS NOT NULL AND ts IS NOT NULL")
    agg = (events.withWatermark("ts", args.lateness)
           .groupBy("device", F.window("ts", args.window)).agg(*kafka_to_delta.aggregates()))
    app = {}
    ready = threading.Event()  # the first batch may run before start() returns the query id

    def write(df: DataFrame, batch_id: int) -> None:
        ready.wait(600)
        kafka_to_delta.write_delta(df.withColumn("batch_id", F.lit(batch_id)), args.global_table,
                                   app["id"], batch_id)

    query = (agg.writeStream.queryName("global_watermark").outputMode("append")
             .foreachBatch(write).option("checkpointLocation", args.global_checkpoint)
             .trigger(availableNow=True).start())
    app["id"] = f"keyed-watermarks-kafka-demo-global-{query.id}"
    ready.set()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"global-watermark query failed: {query.exception()}")


def batch_arrival_s(checkpoint: Path, topic: str, arrival: Dict[tuple, int]) -> Dict[int, int]:
    """Micro-batch -> latest simulated arrival (s) among its messages, from the offset log (a
    no-data batch repeats the offsets of the batch before it)."""
    out, previous = {}, {}
    for n in sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()):
        ends = {int(p): e for p, e in
                json.loads((checkpoint / "offsets" / str(n)).read_text().splitlines()[2])[topic].items()}
        times = [arrival[(p, o)] for p, e in ends.items() for o in range(previous.get(p, 0), e)
                 if (p, o) in arrival]
        out[n] = (max(times) // 1000) if times else out.get(n - 1, 0)
        previous = ends
    return out


def data_batches(checkpoint: Path, topic: str) -> list:
    """The end offsets of each micro-batch that read data (no-data batches left out)."""
    ends = []
    for n in sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()):
        e = json.loads((checkpoint / "offsets" / str(n)).read_text().splitlines()[2])[topic]
        if not ends or e != ends[-1]:
            ends.append(e)
    return ends


def accuracy(spark, args, cfg, device_class) -> dict:
    """iot_demo's metrics over the Kafka run: the valid events as the demo's input files, each
    query's windows stamped with their batch's arrival time as the demo's outputs."""
    work = Path(args.workdir) / "metrics"
    shutil.rmtree(work, ignore_errors=True)
    topic = (spark.read.format("kafka").option("kafka.bootstrap.servers", args.bootstrap_servers)
             .option("subscribe", args.topic).option("startingOffsets", "earliest")
             .option("endingOffsets", "latest").load())
    parsed = F.from_json(F.col("value").cast("string"), kafka_to_delta.VALUE_SCHEMA)
    events = topic.select(F.col("key").cast("string").alias("device"), parsed["ts"].alias("ts"),
                          parsed["temp"].alias("temp"), parsed["arrival_ms"].alias("arrival_ms"),
                          "partition", "offset").where("device IS NOT NULL AND ts IS NOT NULL")
    rows = events.select("partition", "offset", "arrival_ms").collect()
    arrival = {(r.partition, r.offset): r.arrival_ms for r in rows}
    events.select("device", "ts", "temp").write.parquet(str(work / "input"))

    batches = data_batches(Path(args.checkpoint), args.topic)
    assert batches == data_batches(Path(args.global_checkpoint), args.topic), \
        "the two queries ran different micro-batches"
    for method, table, checkpoint in (("keyed", args.results_table, args.checkpoint),
                                      ("global", args.global_table, args.global_checkpoint)):
        cut = batch_arrival_s(Path(checkpoint), args.topic, arrival)
        stamp = spark.createDataFrame(list(cut.items()), "batch_id LONG, emitted_at_s LONG")
        out = spark.read.format("delta").load(table).join(stamp, "batch_id")
        out = out.select("device", "window", "n", "emitted_at_s")
        if method == "keyed":  # the demo's report form: window rows + one row of late counts
            late = spark.read.format("delta").load(args.dead_letter_table).where(
                "kw_watermark IS NOT NULL").count()
            out = out.withColumn("kw_kind", F.lit("window")).withColumn("kw_late_rows", F.lit(None).cast("long"))
            out = out.unionByName(spark.createDataFrame(
                [(None, None, None, None, "late", late)], out.schema))
        out.write.parquet(str(work / "output" / method))
    metrics = iot_demo.compute_metrics(spark, work / "input", work, cfg, device_class, len(rows))
    metrics["micro_batches"] = len(batches)
    return metrics


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--topic", default="iot-demo")
    ap.add_argument("--workdir", default=str(REPO_ROOT / "out" / "kafka"),
                    help="Delta tables and checkpoints (replaced); default: out/kafka")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=1000)
    ap.add_argument("--speedup", type=float, default=0.0,
                    help="producer pace (simulated s per s); 0: as fast as possible")
    ap.add_argument("--quick", action="store_true", help="the demo's small stream")
    ap.add_argument("--report-only", action="store_true",
                    help="only print the tables and accuracy of the run already in --workdir")
    args = ap.parse_args(argv)
    w = Path(args.workdir)
    args.results_table, args.dead_letter_table = str(w / "windows"), str(w / "dead_letter")
    args.checkpoint, args.global_table = str(w / "checkpoints" / "keyed"), str(w / "global_windows")
    args.global_checkpoint = str(w / "checkpoints" / "global")
    cfg = iot_demo.Config.quick() if args.quick else iot_demo.Config()
    args.window, args.lateness = cfg.window, cfg.lateness
    args.starting_offsets, args.available_now, args.trigger_interval = "earliest", True, None
    args.master, args.kafka_package = "local[2]", None
    args.emit, args.accumulation, args.sink = "final", None, "append"
    return args


def run_queries(args, msgs):
    """Produces the stream (unless the topic already holds it), then runs both queries."""
    shutil.rmtree(args.workdir, ignore_errors=True)
    iot_producer.ensure_topic(args.bootstrap_servers, args.topic, 4)
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": args.bootstrap_servers, "group.id": "kw-demo-probe"})
    have = sum(c.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)[1] for p in range(4))
    c.close()
    if have == 0:
        print(f"Producing {len(msgs)} messages ({sum(1 for m in msgs if m.malformed)} malformed) "
              f"to {args.topic!r}", flush=True)
        iot_producer.produce(args.bootstrap_servers, args.topic, msgs, args.speedup)
    elif have != len(msgs):
        raise SystemExit(f"topic {args.topic!r} holds {have} messages, not this stream's "
                         f"{len(msgs)}: use another --topic")
    spark = kafka_to_delta.build_session(args)
    print("Keyed pipeline (examples/kafka_to_delta.py):", flush=True)
    t = time.monotonic()
    query = kafka_to_delta.start(spark, args, log=lambda line: print("  " + line, flush=True))
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"pipeline failed: {query.exception()}")
    keyed_s = time.monotonic() - t
    print(f"Spark's global watermark over the same batches ({keyed_s:.0f} s for the keyed one)...",
          flush=True)
    t = time.monotonic()
    run_global(spark, args)
    print(f"  done in {time.monotonic() - t:.0f} s", flush=True)

    return spark


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    cfg = iot_demo.Config.quick() if args.quick else iot_demo.Config()
    started = time.monotonic()
    msgs = iot_producer.messages(cfg)
    if args.report_only:
        spark = kafka_to_delta.build_session(args)
    else:
        spark = run_queries(args, msgs)
    print(f"\nDelta table {args.results_table} (windows):")
    (spark.read.format("delta").load(args.results_table).orderBy("window", "device")
     .select("device", "window", "n", F.round("avg_temp", 2).alias("avg_temp"), "min_temp",
             "max_temp", "batch_id").show(5, truncate=False))
    print(f"Delta table {args.dead_letter_table} (late rows and malformed messages):")
    (spark.read.format("delta").load(args.dead_letter_table).orderBy("batch_id", "partition", "offset")
     .select("device", "ts", "partition", "offset", "kw_watermark", "kw_reason", "value", "batch_id")
     .show(10, truncate=34))
    _, device_class = iot_demo.generate(cfg)
    metrics = accuracy(spark, args, cfg, device_class)
    span_s = max(m.arrival_ms for m in msgs) / 1000
    shown = dataclasses.replace(cfg, batch_s=round(span_s / metrics["micro_batches"]))
    print(f"\nMicro-batches of at most {args.max_offsets_per_trigger} Kafka messages "
          f"(about {shown.batch_s} s of arrival time each):")
    iot_demo.print_report(metrics, shown, metrics["micro_batches"])
    print(f"\nTotal {time.monotonic() - started:.0f} s.")
    spark.stop()
    return metrics


if __name__ == "__main__":
    main()
