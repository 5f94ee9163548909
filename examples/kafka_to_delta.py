#!/usr/bin/env python
"""IoT pipeline: Kafka in, per-device (keyed) event-time windows, Delta Lake out, exactly once.

One streaming query reads a Kafka topic (key = device id, value = JSON with an event time, as
``examples/iot_producer.py`` writes it), parses it with Spark's ``from_json``, aggregates
per-device windows with ``kw.keyed_watermark(...).window(...).agg_with_report(...,
keep_late_rows=True)`` and, in ``foreachBatch``, writes

- the window results to one Delta table (``--results-table``), and
- the late rows and the rows that cannot be aggregated (malformed messages: no key, JSON that
  does not parse or has no valid event time) to a dead-letter Delta table
  (``--dead-letter-table``), each with its raw message, Kafka partition and offset, the key's
  watermark and the reason.

Exactly once: Spark's checkpoint records each micro-batch's Kafka offsets before the batch
runs, so a restarted query replays an unfinished batch with the same rows and the same state;
each Delta write carries ``txnAppId`` (the streaming query's id, stable across restarts from
the same checkpoint, new for a new checkpoint) and ``txnVersion`` (the batch id), and Delta
skips a write whose version it already committed for that application. A crash between the
two tables' commits therefore leaves nothing doubled and nothing missing after the restart.

Early results (``--emit every_batch --sink merge``): each window also fires an early pane in
every micro-batch that added rows to it, before its device's watermark passes its end (then
its on-time pane, exactly once; docs/semantics.md, "Panes and accumulation"), and the results
table is upserted with Delta's ``MERGE`` on (device, window): it holds one row per window, its
latest pane (the highest ``kw_pane_index``), which ends as the window's final value. The MERGE
is idempotent per batch by the same means as the appends (Delta's idempotent DML: the session
confs ``spark.databricks.delta.write.txnAppId`` / ``txnVersion``), and only replaces a row with
a later pane. With ``--accumulation retracting`` the retraction rows are skipped: a MERGE sink
replaces the previous pane, it does not subtract it.

Runs on Spark 4.2 (the Kafka connector and Delta exist up to 4.2); see README "From Kafka to
Delta". Example::

    python examples/kafka_to_delta.py --bootstrap-servers 127.0.0.1:9092 --topic iot-events \\
        --results-table out/kafka/windows --dead-letter-table out/kafka/dead_letter \\
        --checkpoint out/kafka/checkpoint --available-now

    # early panes upserted into the results table:
    python examples/kafka_to_delta.py --bootstrap-servers 127.0.0.1:9092 --topic iot-events \\
        --results-table out/kafka-merge/windows --dead-letter-table out/kafka-merge/dead_letter \\
        --checkpoint out/kafka-merge/checkpoint --available-now --emit every_batch --sink merge
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence

import pyspark
from pyspark.errors import PySparkValueError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

import keyed_watermarks as kw

REPO_ROOT = Path(__file__).resolve().parents[1]
# The JSON value the producer writes; a field that does not parse becomes null (from_json's
# PERMISSIVE mode), and a row without an event time is an invalid row of the keyed operator.
VALUE_SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, arrival_ms LONG"
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:{version}"
# Delta's idempotent DML (MERGE, UPDATE, DELETE): session confs, the DataFrameWriter's
# txnAppId / txnVersion options for statements that have no writer.
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def aggregates() -> Sequence[Column]:
    return (F.count("*").alias("n"), F.avg("temp").alias("avg_temp"),
            F.min("temp").alias("min_temp"), F.max("temp").alias("max_temp"))


def build_session(args: argparse.Namespace) -> SparkSession:
    """A local session with our jar, Delta and Spark's Kafka connector (resolved by Ivy from
    Maven Central through dev/ivysettings.xml)."""
    from delta import configure_spark_with_delta_pip

    builder = (
        SparkSession.builder.master(args.master)
        .appName("keyed-watermarks-kafka-to-delta")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        # Small tables: Delta's log replay in 2 tasks, not 50.
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.jars.ivySettings", str(REPO_ROOT / "dev" / "ivysettings.xml"))
    )
    package = args.kafka_package or KAFKA_PACKAGE.format(version=pyspark.__version__)
    builder = configure_spark_with_delta_pip(kw.configure(builder), extra_packages=[package])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def kafka_events(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    """The topic as events: device (the message key), ts, temp, arrival_ms from the JSON
    value, and the raw value with its Kafka coordinates (kept in the dead-letter table)."""
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.topic)
              .option("startingOffsets", args.starting_offsets)
              # A gap in the offsets (deleted segments) fails the query instead of skipping rows.
              .option("failOnDataLoss", "true"))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
    raw = reader.load()
    value = F.col("value").cast("string")
    parsed = F.from_json(value, VALUE_SCHEMA)
    return raw.select(
        F.col("key").cast("string").alias("device"),
        parsed["ts"].alias("ts"),
        parsed["temp"].alias("temp"),
        parsed["arrival_ms"].alias("arrival_ms"),
        value.alias("value"),
        "partition",
        "offset",
    )


def keyed_report(events: DataFrame, args: argparse.Namespace) -> DataFrame:
    return (kw.keyed_watermark(events, key="device", event_time="ts", lateness=args.lateness)
            .window(args.window, emit=args.emit, accumulation=args.accumulation)
            .agg_with_report(*aggregates(), keep_late_rows=True))


def write_delta(df: DataFrame, path: str, app_id: str, batch_id: int) -> None:
    """Appends ``df`` to the Delta table at ``path`` once per (app_id, batch_id): Delta skips
    the write if this application already committed this version to the table."""
    (df.write.format("delta").mode("append")
     .option("txnAppId", app_id).option("txnVersion", batch_id)
     .save(path))


def merge_delta(panes: DataFrame, path: str, app_id: str, batch_id: int) -> None:
    """Upserts a micro-batch's panes into the Delta table at ``path`` (created on first use),
    once per (app_id, batch_id): a window's row is inserted, or replaced by a pane with a higher
    ``kw_pane_index``. A batch holds at most one pane per window (plus, with accumulation
    'retracting', the retraction of the window's previous pane, which a MERGE does not need:
    the new pane replaces that row), so MERGE never sees two source rows for one target row."""
    from delta.tables import DeltaTable

    spark = panes.sparkSession
    if "kw_retraction" in panes.columns:
        panes = panes.where(~F.col("kw_retraction")).drop("kw_retraction")
    DeltaTable.createIfNotExists(spark).location(path).addColumns(panes.schema).execute()
    # Set for this statement only: Delta skips it if this application already committed this
    # version to the table (a replay of a batch whose MERGE committed before a crash).
    spark.conf.set(TXN_APP_ID, app_id)
    spark.conf.set(TXN_VERSION, str(batch_id))
    try:
        (DeltaTable.forPath(spark, path).alias("t")
         .merge(panes.alias("s"), "t.device = s.device AND t.window = s.window")
         .whenMatchedUpdateAll(condition="s.kw_pane_index > t.kw_pane_index")
         .whenNotMatchedInsertAll()
         .execute())
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


class BatchWriter:
    """The foreachBatch function (built with ``kw.foreach_batch``): window results to one
    Delta table, late and invalid rows to the dead-letter table, each idempotently; keeps
    per-batch counts for the progress line."""

    def __init__(self, results_table: str, dead_letter_table: str, sink: str = "append") -> None:
        self.results_table = results_table
        self.sink = sink
        self.dead_letter_table = dead_letter_table
        self._app_id: Optional[str] = None
        self._app_id_set = threading.Event()
        self.stats: Dict[int, dict] = {}
        self.function = kw.foreach_batch(results=self._results, late_rows=self._dead_letter)

    def set_app_id(self, query_id: str) -> None:
        self._app_id = f"keyed-watermarks-kafka-to-delta-{query_id}"
        self._app_id_set.set()

    def app_id(self) -> str:
        # The first batch can start before start() has returned the query's id.
        if not self._app_id_set.wait(timeout=600):
            raise RuntimeError("the streaming query's id was never set")
        return self._app_id

    def _results(self, df: DataFrame, batch_id: int) -> None:
        # Looked up at call time (not bound here): tests/kafka_crash_runner.py wraps both.
        write = merge_delta if self.sink == "merge" else write_delta
        write(df.withColumn("batch_id", F.lit(batch_id)), self.results_table, self.app_id(), batch_id)
        if "kw_retraction" in df.columns:  # count the panes, not their retractions
            df = df.where(~F.col("kw_retraction"))
        row = df.agg(F.count("*").alias("w"), F.countDistinct("device").alias("k")).first()
        self.stats.setdefault(batch_id, {}).update(windows=row.w, keys=row.k)

    def _dead_letter(self, df: DataFrame, batch_id: int) -> None:
        write_delta(df.withColumn("batch_id", F.lit(batch_id)), self.dead_letter_table,
                    self.app_id(), batch_id)
        row = df.agg(F.count("*").alias("all"),
                     F.count(F.when(F.col("kw_watermark").isNotNull(), 1)).alias("late")).first()
        self.stats.setdefault(batch_id, {}).update(late=row.late, invalid=row.all - row.late)


class ProgressPrinter(StreamingQueryListener):
    """One line per micro-batch: Kafka rows read, windows written (keys), late and invalid
    rows dead-lettered. Input counts come from the query's progress (observed metrics)."""

    def __init__(self, writer: BatchWriter, log: Callable[[str], None]) -> None:
        self.writer = writer
        self.log = log
        self.last_input_at = time.monotonic()

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        p = event.progress
        if p.numInputRows > 0:
            self.last_input_at = time.monotonic()
        s = self.writer.stats.pop(p.batchId, None)
        if s is None:  # an idle progress report: no batch ran
            return
        # numInputRows counts each scan of the source; the keyed plan scans the topic twice
        # (aggregation and invalid rows), so the row count comes from the operator's metric.
        metrics = p.observedMetrics.get("keyed_watermarks_input")
        rows = metrics["input_rows"] if metrics is not None else "?"
        self.log(f"batch {p.batchId}: {rows} rows from Kafka, "
                 f"{s.get('windows', 0)} windows written ({s.get('keys', 0)} keys), "
                 f"{s.get('late', 0)} late rows and {s.get('invalid', 0)} invalid rows "
                 f"to the dead-letter table")

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def start(spark: SparkSession, args: argparse.Namespace,
          log: Callable[[str], None] = print) -> StreamingQuery:
    writer = BatchWriter(args.results_table, args.dead_letter_table, args.sink)
    report = keyed_report(kafka_events(spark, args), args)
    printer = ProgressPrinter(writer, log)
    spark.streams.addListener(printer)
    stream = (report.writeStream.queryName("kafka_to_delta")
              .foreachBatch(writer.function)
              .option("checkpointLocation", args.checkpoint))
    if args.available_now:
        stream = stream.trigger(availableNow=True)
    elif args.trigger_interval:
        stream = stream.trigger(processingTime=args.trigger_interval)
    query = stream.start()
    writer.set_app_id(query.id)
    query.printer = printer  # for --stop-when-idle
    return query


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", required=True, help="Kafka host:port list")
    ap.add_argument("--topic", default="iot-events")
    ap.add_argument("--results-table", required=True, help="Delta table path for the windows")
    ap.add_argument("--dead-letter-table", required=True,
                    help="Delta table path for late rows and malformed messages")
    ap.add_argument("--checkpoint", required=True, help="the query's checkpoint location")
    ap.add_argument("--window", default="1 minute")
    ap.add_argument("--lateness", default="30 seconds", help="per-device lateness")
    ap.add_argument("--emit", choices=("final", "every_batch"), default="final",
                    help="final: each window once, when its device's watermark passes it; "
                         "every_batch: also an early pane in every batch that changed it "
                         "(default: %(default)s)")
    ap.add_argument("--accumulation", choices=("accumulating", "retracting", "discarding"),
                    help="what a repeated pane holds (with --emit every_batch; default: "
                         "accumulating)")
    ap.add_argument("--sink", choices=("append", "merge"), default="append",
                    help="append: every pane is a row of the results table; merge: MERGE on "
                         "(device, window), one row per window, its latest pane (needs --emit "
                         "every_batch) (default: %(default)s)")
    ap.add_argument("--starting-offsets", default="earliest",
                    help="Kafka startingOffsets for a new checkpoint (default: %(default)s)")
    ap.add_argument("--max-offsets-per-trigger", type=int,
                    help="at most this many Kafka messages per micro-batch")
    trigger = ap.add_mutually_exclusive_group()
    trigger.add_argument("--available-now", action="store_true",
                         help="process what the topic holds now, then stop")
    trigger.add_argument("--trigger-interval", help='e.g. "5 seconds" (default: as fast as possible)')
    ap.add_argument("--stop-when-idle", type=float, metavar="SECONDS",
                    help="stop once no Kafka rows arrived for this long")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--kafka-package",
                    help="Maven coordinates of Spark's Kafka connector (default: "
                         "spark-sql-kafka-0-10_2.13 of the running pyspark's version)")
    args = ap.parse_args(argv)
    for name in ("results_table", "dead_letter_table", "checkpoint"):
        if not getattr(args, name).strip():
            raise PySparkValueError(message=f"--{name.replace('_', '-')} must not be empty")
    if args.results_table == args.dead_letter_table:
        raise PySparkValueError(message="--results-table and --dead-letter-table must differ")
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        raise PySparkValueError(message="--max-offsets-per-trigger must be >= 1")
    if args.accumulation is not None and args.emit != "every_batch":
        raise PySparkValueError(message="--accumulation needs --emit every_batch (repeated panes)")
    if args.sink == "merge" and args.emit != "every_batch":
        raise PySparkValueError(
            message="--sink merge needs --emit every_batch (with --emit final each window is "
                    "written once: --sink append)")
    if args.sink == "merge" and args.accumulation == "discarding":
        raise PySparkValueError(
            message="--sink merge keeps each window's latest pane, which with --accumulation "
                    "discarding holds only the rows since the previous pane: use accumulating "
                    "or retracting")
    return args


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    spark = build_session(args)
    query = start(spark, args, log=lambda line: print(line, flush=True))
    print(f"Query {query.id} reading {args.topic!r} from {args.bootstrap_servers}", flush=True)
    # SIGTERM (and Ctrl-C) stop the query between batches; kill -9 is what the crash test does.
    signal.signal(signal.SIGTERM, lambda *_: query.stop())
    try:
        while not query.awaitTermination(1):
            idle = time.monotonic() - query.printer.last_input_at
            if args.stop_when_idle is not None and idle > args.stop_when_idle:
                print(f"No Kafka rows for {idle:.0f} s: stopping.", flush=True)
                query.stop()
    except KeyboardInterrupt:
        query.stop()
    if query.exception() is not None:
        raise SystemExit(f"query failed: {query.exception()}")
    spark.stop()


if __name__ == "__main__":
    main()
