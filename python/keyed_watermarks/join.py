"""The per-key as-of (temporal) join: each reading joined to the version of its key valid at
the reading's event time (docs/semantics.md, "As-of join")."""

from __future__ import annotations

from typing import Sequence, Union

from pyspark.errors import PySparkNotImplementedError, PySparkTypeError
from pyspark.sql import DataFrame

from keyed_watermarks._jvm import is_connect, python_api
from keyed_watermarks.keyed import Duration, _duration

_SCALA_ENTRY = "io.github.keyedwatermarks.KeyedAsOfJoin"


def as_of_join(
    readings: DataFrame,
    versions: DataFrame,
    key: Union[str, Sequence[str]],
    reading_time: str,
    version_time: str,
    lateness: Duration,
    versions_delay: Duration = "0 seconds",
) -> DataFrame:
    """Joins each reading to the version of its key valid at the reading's time: the version
    with the greatest ``version_time`` at or before the reading's ``reading_time``.

    :param readings: a streaming DataFrame of readings.
    :param versions: a streaming DataFrame of versions (a key's changes over time), with the
        same key columns (names and types).
    :param key: the key column name(s).
    :param reading_time: the readings' event-time column (TIMESTAMP).
    :param version_time: the versions' column of the time each version is valid from (TIMESTAMP).
    :param lateness: a key's readings are late below its max reading time minus this.
    :param versions_delay: the versions stream's watermark is its max version time minus this
        (Spark's watermark, defined on the versions side); a reading is held until it passes.
    :returns: a streaming DataFrame: the readings' columns, the versions' columns other than the
        keys (null without a version), and ``join_status`` (``"joined"``, ``"no_version"``,
        ``"late"`` or ``"invalid"``); one row per reading.

    Not yet on Spark Connect sessions (refused). Bad input fails before the query starts,
    naming the column or option:

    >>> readings = spark.readStream.format("rate").load().selectExpr(
    ...     "value % 3 AS device", "timestamp AS ts", "value AS temp")
    >>> versions = spark.readStream.format("rate").load().selectExpr(
    ...     "value % 3 AS device", "timestamp AS valid_from", "CAST(value AS STRING) AS firmware")
    >>> joined = kw.as_of_join(readings, versions, key="device", reading_time="ts",
    ...                        version_time="valid_from", lateness="1 minute")
    >>> joined.columns
    ['device', 'ts', 'temp', 'valid_from', 'firmware', 'join_status']
    >>> kw.as_of_join(readings, versions.withColumnRenamed("device", "id"), key="device",
    ...               reading_time="ts", version_time="valid_from", lateness="1 minute")
    Traceback (most recent call last):
        ...
    pyspark.errors.exceptions.captured.IllegalArgumentException: as_of_join: key column 'device' is not a column of versions; ...
    """
    if is_connect(readings.sparkSession) or is_connect(versions.sparkSession):
        raise PySparkNotImplementedError(
            message="kw.as_of_join is not yet supported on Spark Connect sessions; use a classic session"
        )
    keys = [key] if isinstance(key, str) else list(key)
    if not keys or not all(isinstance(k, str) for k in keys):
        raise PySparkTypeError(message=f"as_of_join: key must be a column name or a list of names, got {key!r}")
    python_api(readings)  # the jar is on the session's classpath, else a clear error
    jvm = readings.sparkSession.sparkContext._jvm
    assert jvm is not None
    jkeys = jvm.java.util.ArrayList()
    for k in keys:
        jkeys.add(k)
    entry = getattr(jvm, _SCALA_ENTRY)
    jdf = entry.fromPython(readings._jdf, versions._jdf, jkeys, reading_time, version_time,
                           _duration("lateness", lateness), _duration("versions_delay", versions_delay))
    return DataFrame(jdf, readings.sparkSession)
