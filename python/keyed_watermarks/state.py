"""Per-key visibility: the keys a keyed-watermark query holds in state, read from its checkpoint."""

from __future__ import annotations

from typing import Optional, Sequence, Union

from pyspark.errors import PySparkTypeError, PySparkValueError
from pyspark.sql import Column, DataFrame, SparkSession, functions as F
from pyspark.sql.types import StructType

from keyed_watermarks._contract import KEY_STATE_VARIABLE, STATE_UNDEFINED as _UNDEFINED


def read_key_state(
    spark: SparkSession,
    checkpoint_location: str,
    key: Union[str, Sequence[str], None] = None,
    batch_id: Optional[int] = None,
    operator_id: int = 0,
) -> DataFrame:
    """One row per key in a keyed-watermark query's state, from its checkpoint.

    :param spark: the SparkSession to read with.
    :param checkpoint_location: the query's checkpoint location.
    :param key: names for the key columns (default ``key_0``, ``key_1``, ...).
    :param batch_id: read the state after this micro-batch (default: the last committed one).
    :param operator_id: the stateful operator, for a query with several keyed stages (default 0).
    :returns: a DataFrame of one row per key in state.

    Built on Spark's state data source (``spark.read.format("statestore")``, state variable
    ``key_state``), so it reads what the query committed, while it runs or after it stopped.
    Columns (`Semantics, "Per-key state" <../semantics.html#per-key-state-kw-read-key-state>`__):

    - the key columns: ``key_0``, ``key_1``, ... or the names given in ``key``;
    - ``watermark``, ``max_event_time`` (TIMESTAMP; null while undefined);
    - ``open_windows`` (INT) and ``earliest_window_start`` (TIMESTAMP; null without one);
    - ``late_rows``, ``attempted_regressions`` (BIGINT): since the key has state;
    - ``lateness`` (INTERVAL DAY TO SECOND): the key's current lateness;
    - ``last_batch_with_rows`` (TIMESTAMP): the processing time of its last micro-batch with rows;
    - ``idle_since`` (TIMESTAMP; idle_timeout only): since when the idle key has had no window.

    ``batch_id`` reads the state after that micro-batch (default: the last committed one);
    ``operator_id`` selects the stateful operator if the query has several.

    >>> import datetime, tempfile
    >>> d = tempfile.mkdtemp()
    >>> schema = "device STRING, ts TIMESTAMP, temp DOUBLE"
    >>> spark.createDataFrame([("a", datetime.datetime(2026, 3, 2, 8, 0, 1), 20.0)],
    ...                       schema).write.parquet(f"{d}/in")
    >>> query = (kw.keyed_watermark(spark.readStream.schema(schema).parquet(f"{d}/in"),
    ...                             key="device", event_time="ts", lateness="5 seconds")
    ...          .window("10 seconds").agg(F.count("*").alias("n"))
    ...          .writeStream.format("noop").option("checkpointLocation", f"{d}/chk").start())
    >>> query.processAllAvailable()
    >>> query.stop()
    >>> state = kw.read_key_state(spark, f"{d}/chk", key="device")
    >>> [(r.device, str(r.watermark), r.open_windows) for r in state.collect()]
    [('a', '2026-03-02 07:59:56', 1)]
    """
    if not isinstance(checkpoint_location, str) or not checkpoint_location:
        raise PySparkTypeError(message=f"checkpoint_location: expected a path, got {checkpoint_location!r}")
    names = None
    if key is not None:
        names = [key] if isinstance(key, str) else list(key)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise PySparkTypeError(message=f"key: expected a column name or a list of names, got {key!r}")
    reader = (spark.read.format("statestore").option("path", checkpoint_location)
              .option("stateVarName", KEY_STATE_VARIABLE).option("operatorId", operator_id))
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    state = reader.load()
    key_type = state.schema["key"].dataType
    assert isinstance(key_type, StructType)  # the state data source's key is a struct
    key_fields = key_type.fieldNames()
    if names is not None and len(names) != len(key_fields):
        raise PySparkValueError(
            message=f"key: the state has {len(key_fields)} key column(s), got names {names!r}")
    out_names = names or [f"key_{i}" for i in range(len(key_fields))]
    v = "value."

    def defined(name: str) -> Column:
        c = F.col(v + name)
        return F.when(c != F.lit(_UNDEFINED), c)

    def timestamp_us(name: str) -> Column:
        return F.timestamp_micros(defined(name))

    def timestamp_ms(name: str) -> Column:
        return F.timestamp_millis(defined(name))

    return state.select(
        *[F.col(f"key.{f}").alias(n) for f, n in zip(key_fields, out_names)],
        timestamp_us("watermark_us").alias("watermark"),
        timestamp_us("max_event_time_us").alias("max_event_time"),
        F.col(v + "open_window_count").alias("open_windows"),
        timestamp_us("earliest_window_start_us").alias("earliest_window_start"),
        F.col(v + "late_rows").alias("late_rows"),
        F.col(v + "regressions").alias("attempted_regressions"),
        F.make_dt_interval(secs=F.col(v + "lateness_us").cast("decimal(20,6)") / 1_000_000).alias("lateness"),
        timestamp_ms("last_arrival_ms").alias("last_batch_with_rows"),
        timestamp_ms("quiet_since_ms").alias("idle_since"),
    )


__all__ = ["read_key_state"]
