"""A keyed-watermark query for tests/test_kill_recovery.py, run as its own process so the test
can kill it with SIGKILL at any moment:

    python tests/kill_queries.py SINK CHANGELOG INPUT OUT CHECKPOINT TRIGGER

SINK is ``parquet`` (Spark's file sink, exactly once through its metadata log) or ``foreach``
(``foreachBatch`` writing each micro-batch to ``OUT/batch=<id>`` with ``overwrite``, so a
re-run micro-batch replaces its own output). CHANGELOG is ``on`` or ``off`` (RocksDB changelog
checkpointing). TRIGGER is ``continuous`` (one micro-batch after another until killed) or
``available`` (all available input, then exit).
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession, functions as F

import keyed_watermarks as kw

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"


def main(sink: str, changelog: str, source: str, out: str, checkpoint: str, trigger: str) -> None:
    spark = kw.configure(SparkSession.builder.master("local[2]").appName("kw-kill")
                         .config("spark.sql.shuffle.partitions", "2")
                         .config("spark.ui.enabled", "false")
                         .config("spark.sql.session.timeZone", "UTC")
                         .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                                 "true" if changelog == "on" else "false")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
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
    query = writer.start()
    print("STARTED", flush=True)
    query.awaitTermination()
    if query.exception():
        raise query.exception()


if __name__ == "__main__":
    main(*sys.argv[1:7])
