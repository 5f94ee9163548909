"""The queries and bad inputs that tests/test_connect_parity.py runs on a classic and on a Spark
Connect session. Every run returns plain JSON data, so the two sessions' results can be compared
whole: for each query the rows of each micro-batch (read back from the file sink's own log of
which files each batch wrote), each batch's ``kw.metrics`` and input row count; for each bad input
the exception's pyspark.errors type and message.

Run as a script it builds a local Connect session (``kw.configure(builder.remote("local[2]"))``),
runs everything and writes the JSON to the path given (see test_connect_parity.py for why in a
separate process).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

import pyarrow.parquet as pq
from pyspark.errors import (
    AnalysisException,
    IllegalArgumentException,
    PySparkRuntimeError,
    PySparkTypeError,
    PySparkValueError,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import keyed_watermarks as kw

SCHEMA = "device STRING, gw STRING, ts TIMESTAMP, temp DOUBLE"
T0 = dt.datetime(2024, 1, 1)

# The session settings of tests/conftest.py's classic session, for the Connect one.
SESSION_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # Errors as on a classic session: the message without the server's stack trace.
    "spark.sql.connect.serverStacktrace.enabled": "false",
    "spark.sql.pyspark.jvmStacktrace.enabled": "false",
}


def _row(device, gw, second, temp):
    return (device, gw, None if second is None else T0 + dt.timedelta(seconds=second), temp)


# Four micro-batches: on-time rows, rows late for one key only, rows still in an open window,
# invalid rows (null key, null event time, null source), and later rows that close windows.
BATCHES = [
    [_row("a", "g1", 1, 1.0), _row("a", "g2", 4, 2.0), _row("b", "g1", 2, 3.0), _row("b", "g2", 12, 4.0),
     _row("a", "g1", 11, 5.0)],
    [_row("a", "g2", 25, 6.0), _row("b", "g1", 3, 7.0), _row("a", "g1", 8, 8.0), _row("b", "g1", 30, 9.0)],
    [_row("a", "g1", 2, 10.0), _row("b", "g2", 41, 11.0), _row("a", "g2", 45, 12.0), _row(None, "g1", 46, 13.0),
     _row("a", "g1", None, 14.0), _row("b", None, 43, 15.0), _row("b", "g1", 27, 16.0)],
    [_row("a", "g1", 60, 17.0), _row("b", "g2", 70, 18.0), _row("a", "g2", 40, 19.0), _row("b", "g1", 71, 20.0)],
]


def _aggs():
    return [F.count("*").alias("n"), F.sum("temp").alias("total"), F.max("temp").alias("hottest")]


def _keyed(events: DataFrame, **options: Any) -> kw.KeyedWatermark:
    args: Dict[str, Any] = dict(key="device", event_time="ts", lateness="5 seconds")
    args.update(options)
    return kw.keyed_watermark(events, **args)


# Each query: streaming events -> the streaming result written to the file sink.
QUERIES: Dict[str, Callable[[DataFrame], DataFrame]] = {
    "tumbling_report": lambda e: _keyed(e).window("10 seconds").agg_with_report(*_aggs()),
    "sliding": lambda e: _keyed(e).window("10 seconds", slide="5 seconds").agg(*_aggs()),
    "session_fixed_gap": lambda e: _keyed(e).session("6 seconds").agg(*_aggs()),
    "session_gap_column": lambda e: _keyed(e)
    .session(F.when(F.col("device") == "a", F.lit("3 seconds")).otherwise(F.lit("8 seconds")))
    .agg(*_aggs()),
    "key_lateness_column": lambda e: _keyed(e, key_lateness=F.when(F.col("device") == "b", F.lit("20 seconds")))
    .window("10 seconds")
    .agg_with_report(*_aggs()),
    "max_skew": lambda e: _keyed(e, max_skew="10 seconds").window("10 seconds").agg_with_report(*_aggs()),
    "source_column": lambda e: _keyed(e, source="gw", sources=["g1", "g2"])
    .window("10 seconds")
    .agg_with_report(*_aggs(), keep_late_rows=True),
    "allowed_lateness": lambda e: _keyed(e).window("10 seconds", allowed_lateness="20 seconds").agg(*_aggs()),
    # Early panes every batch, each after the retraction of the window's previous pane, and
    # late panes within allowed lateness: the pane columns and rows a Connect user gets.
    "early_retracting": lambda e: _keyed(e)
    .window("10 seconds", allowed_lateness="20 seconds", emit="every_batch", accumulation="retracting")
    .agg(*_aggs()),
    # Per-key dedup: a device's later rows through a gateway it already used are copies until
    # the first row's window closes.
    "dedup": lambda e: _keyed(e, dedup=["gw"]).window("10 seconds").agg_with_report(*_aggs(), keep_late_rows=True),
    # Idle keys on the arrival clock (the arrival_time Column travels through the option seam).
    "idle_arrival_clock": lambda e: _keyed(e, idle_timeout="20 seconds", arrival_time=F.col("ts"))
    .window("10 seconds")
    .agg_with_report(*_aggs()),
    # A pipeline: per device, then rolled up over the whole fleet (min of the devices).
    "rollup": lambda e: kw.rollup(_keyed(e).window("10 seconds").agg(*_aggs()).withColumn("fleet", F.lit("all")),
                                  key="fleet", source="device")
    .window("10 seconds")
    .agg(F.sum("n").alias("n"), F.max("hottest").alias("hottest")),
}


def _g2(e: DataFrame, time: str, value: str) -> DataFrame:
    """The gateway g2's rows as a join's second side (g1's are the first)."""
    return e.where(F.col("gw") == "g2").select("device", F.col("ts").alias(time), F.col("temp").alias(value))


# The per-key joins: their two sides are the gateways' rows of the same stream.
JOINS: Dict[str, Callable[[DataFrame], DataFrame]] = {
    "as_of_join": lambda e: kw.as_of_join(e.where(F.col("gw") == "g1"), _g2(e, "valid_from", "version_temp"),
                                          key="device", reading_time="ts", version_time="valid_from",
                                          lateness="5 seconds"),
    "interval_join": lambda e: kw.interval_join(e.where(F.col("gw") == "g1"), _g2(e, "ts2", "temp2"), key="device",
                                                left_time="ts", right_time="ts2", before="5 seconds",
                                                after="5 seconds", lateness="5 seconds", how="left_outer",
                                                name="pairs"),
}

# The stage whose windows a query writes, when it has several (kw.metrics' "stages", by name).
OUTPUT_STAGE = {"rollup": "fleet"}


def replay(spark: SparkSession, root: Path) -> DataFrame:
    """The batches as parquet files for the file source, one file per micro-batch, ordered by
    modification time (as tests/conftest.py's Replay does)."""
    source = root / "input"
    source.mkdir(parents=True)
    for i, rows in enumerate(BATCHES):
        tmp = root / f"tmp-{i}"
        spark.createDataFrame(rows, SCHEMA).coalesce(1).write.parquet(str(tmp))
        (part,) = [p for p in tmp.iterdir() if p.name.endswith(".parquet")]
        target = source / f"batch-{i:02d}.parquet"
        shutil.move(str(part), target)
        shutil.rmtree(tmp)
        os.utime(target, (1_000_000 + i, 1_000_000 + i))
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _sorted_rows(rows: List[dict]) -> List[dict]:
    plain = [_plain(r) for r in rows]
    return sorted(plain, key=lambda r: json.dumps(r, sort_keys=True))


def _rows_per_batch(out: Path) -> Dict[str, List[dict]]:
    """Rows by the batch that wrote them, from the file sink's log (_spark_metadata/<batch>)."""
    per_batch: Dict[str, List[dict]] = {}
    log = out / "_spark_metadata"
    for entry in sorted(log.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
        if not entry.name.isdigit():
            continue
        files = [json.loads(line)["path"] for line in entry.read_text().splitlines()[1:] if line.strip()]
        rows: List[dict] = []
        for f in files:
            rows.extend(pq.read_table(f.removeprefix("file://")).to_pylist())
        per_batch[entry.name] = _sorted_rows(rows)
    return per_batch


def _progress(query: Any) -> Dict[str, Any]:
    return {
        str(p["batchId"]): {"metrics": kw.metrics(p), "input_rows": p.numInputRows} for p in query.recentProgress
    }


def run_query(name: str, spark: SparkSession, root: Path) -> Dict[str, Any]:
    events = replay(spark, root)
    result = {**QUERIES, **JOINS}[name](events)
    out = root / "out"
    query = (
        result.writeStream.format("parquet")
        .outputMode("append")
        .option("path", str(out))
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{name}: {query.exception()}")
    return {"columns": result.columns, "rows": _rows_per_batch(out), "progress": _progress(query)}


def _batch_writer(path: Path) -> Callable[[DataFrame, int], None]:
    def write(df: DataFrame, batch_id: int) -> None:
        df.withColumn("kw_batch", F.lit(batch_id)).write.mode("append").parquet(str(path))

    return write


def run_foreach_batch(spark: SparkSession, root: Path) -> Dict[str, Any]:
    """keep_late_rows, written with kw.foreach_batch (split_report) to a results and a
    dead-letter table; on Connect the function runs in a Python worker of the server."""
    events = replay(spark, root)
    report = _keyed(events).window("10 seconds").agg_with_report(*_aggs(), keep_late_rows=True)
    query = (
        report.writeStream.foreachBatch(
            kw.foreach_batch(results=_batch_writer(root / "results"), late_rows=_batch_writer(root / "late"))
        )
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"foreach_batch: {query.exception()}")

    def table(path: Path) -> List[dict]:
        return _sorted_rows(pq.read_table(str(path)).to_pylist()) if path.exists() else []

    return {
        "results": table(root / "results"),
        "late_rows": table(root / "late"),
        "progress": _progress(query),
    }


# ---- bad input: each raises before any query starts ------------------------------------

BAD_INPUTS: Dict[str, Callable[[DataFrame, DataFrame], Any]] = {
    "bad_lateness": lambda e, b: _keyed(e, lateness="5 parsecs"),
    "negative_lateness": lambda e, b: _keyed(e, lateness=dt.timedelta(seconds=-5)),
    "missing_lateness": lambda e, b: _keyed(e, lateness=None),
    "lateness_not_a_duration": lambda e, b: _keyed(e, lateness=5),
    "unknown_key": lambda e, b: _keyed(e, key="no_such_device"),
    "event_time_string": lambda e, b: _keyed(e, event_time="gw"),
    "event_time_also_key": lambda e, b: _keyed(e, key=["device", "ts"]),
    "batch_dataframe": lambda e, b: _keyed(b),
    "bad_clock": lambda e, b: _keyed(e, clock="wall"),
    "sources_without_source": lambda e, b: _keyed(e, sources=["g1"]),
    "both_lateness_kinds": lambda e, b: _keyed(e, key_lateness={"a": "1 minute"}, adaptive_lateness=kw.AdaptiveLateness()),
    "key_lateness_column_type": lambda e, b: _keyed(e, key_lateness=F.col("temp")),
    "bad_window": lambda e, b: _keyed(e).window("10 fortnights"),
    "month_window": lambda e, b: _keyed(e).window("1 month"),
    "slide_too_large": lambda e, b: _keyed(e).window("10 seconds", slide="11 seconds"),
    "too_many_windows": lambda e, b: _keyed(e).window("10 seconds", slide="1 microsecond"),
    "bad_emit": lambda e, b: _keyed(e).window("10 seconds", emit="sometimes"),
    "accumulation_without_early_panes": lambda e, b: _keyed(e).window("10 seconds", accumulation="retracting"),
    "emit_not_a_string": lambda e, b: _keyed(e).window("10 seconds", emit=True),
    "gap_column_type": lambda e, b: _keyed(e).session(F.col("temp")),
    "non_aggregate": lambda e, b: _keyed(e).window("10 seconds").agg(F.col("temp")),
    "unknown_aggregate_column": lambda e, b: _keyed(e).window("10 seconds").agg(F.sum("no_such_column")),
    "distinct_aggregate": lambda e, b: _keyed(e).window("10 seconds").agg(F.count_distinct("temp")),
    "empty_agg": lambda e, b: _keyed(e).window("10 seconds").agg_with_report(),
    "duplicate_result_name": lambda e, b: _keyed(e).window("10 seconds").agg(F.count("*").alias("device")),
    "agg_not_a_column": lambda e, b: _keyed(e).window("10 seconds").agg("temp"),
    "idle_without_arrival_time": lambda e, b: _keyed(e, idle_timeout="1 minute"),
    "arrival_time_not_timestamp": lambda e, b: _keyed(e, idle_timeout="1 minute", arrival_time="gw"),
    "bad_idle_clock": lambda e, b: _keyed(e, idle_timeout="1 minute", idle_clock="wall"),
    "as_of_join_key_type": lambda e, b: kw.as_of_join(
        e, e.select(F.col("temp").alias("device"), F.col("ts").alias("valid_from")), key="device",
        reading_time="ts", version_time="valid_from", lateness="5 seconds"),
    "interval_join_bad_how": lambda e, b: kw.interval_join(
        e, _g2(e, "ts2", "temp2"), key="device", left_time="ts", right_time="ts2", before="1 second",
        after="1 second", lateness="1 second", how="outer"),
    "interval_join_batch_side": lambda e, b: kw.interval_join(
        e, _g2(b, "ts2", "temp2"), key="device", left_time="ts", right_time="ts2", before="1 second",
        after="1 second", lateness="1 second"),
    "interval_join_bad_name": lambda e, b: kw.interval_join(
        e, _g2(e, "ts2", "temp2"), key="device", left_time="ts", right_time="ts2", before="1 second",
        after="1 second", lateness="1 second", name="two words"),
}

_KINDS = (IllegalArgumentException, AnalysisException, PySparkTypeError, PySparkValueError, PySparkRuntimeError)


def normalized_message(e: BaseException, work: Path) -> str:
    """The message without what differs between two sessions by nature: expression ids, node ids
    (``temp#17``) and each run's own directory in plan strings."""
    text = re.sub(r"#\d+", "#", str(e)).replace(str(work), "<work>")
    # Random per plan: the id of Spark's EventTimeWatermark node (the default skew bound adds one).
    return re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>", text)


def run_bad_inputs(spark: SparkSession, root: Path) -> Dict[str, Any]:
    source = root / "empty"
    source.mkdir(parents=True)
    events = spark.readStream.schema(SCHEMA).parquet(str(source))
    batch = spark.createDataFrame([], SCHEMA)
    errors: Dict[str, Any] = {}
    for name, bad in BAD_INPUTS.items():
        try:
            bad(events, batch)
        except Exception as e:  # noqa: BLE001 - the type is what is recorded
            kind = next((k.__name__ for k in _KINDS if isinstance(e, k)), f"unexpected {type(e).__name__}")
            errors[name] = {"type": kind, "message": normalized_message(e, root)}
        else:
            errors[name] = {"type": "no error", "message": ""}
    errors["queries_started"] = len(spark.streams.active)
    return errors


def run_all(spark: SparkSession, root: Path) -> Dict[str, Any]:
    out: Dict[str, Any] = {name: run_query(name, spark, root / name) for name in [*QUERIES, *JOINS]}
    out["foreach_batch"] = run_foreach_batch(spark, root / "foreach_batch")
    out["bad_inputs"] = run_bad_inputs(spark, root / "bad_inputs")
    return out


def connect_session() -> SparkSession:
    builder = SparkSession.builder.remote("local[2]")
    for k, v in SESSION_CONF.items():
        builder = builder.config(k, v)
    return kw.configure(builder).getOrCreate()


if __name__ == "__main__":
    work, result_file = Path(sys.argv[1]), Path(sys.argv[2])
    session = connect_session()
    try:
        assert type(session).__module__.startswith("pyspark.sql.connect"), type(session)
        result_file.write_text(json.dumps(run_all(session, work)))
    finally:
        session.stop()
