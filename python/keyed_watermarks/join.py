"""The per-key joins: the as-of (temporal) join, each reading joined to the version of its key
valid at the reading's event time (docs/semantics.md, "As-of join"), and the keyed interval
join, rows of two streams of the same key within a time interval of each other
(docs/semantics.md, "Interval join")."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from pyspark.errors import PySparkTypeError
from pyspark.sql import DataFrame

from keyed_watermarks._jvm import is_connect, python_api
from keyed_watermarks.keyed import Duration, _duration

_SCALA_ENTRY = "io.github.keyedwatermarks.KeyedAsOfJoin"
_SCALA_INTERVAL_ENTRY = "io.github.keyedwatermarks.KeyedIntervalJoin"


def as_of_join(
    readings: DataFrame,
    versions: DataFrame,
    key: Union[str, Sequence[str]],
    reading_time: str,
    version_time: str,
    lateness: Duration,
    versions_delay: Duration = "0 seconds",
    name: Optional[str] = None,
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
    :param name: the join's name in its metrics, ``observedMetrics["keyed_watermarks_join.<name>"]``
        (default: none for the query's first join, ``"keyed_watermarks_join"``, else the key
        columns joined with ``_``); letters, digits and ``_``.
    :returns: a streaming DataFrame: the readings' columns, the versions' columns other than the
        keys (null without a version), and ``join_status`` (``"joined"``, ``"no_version"``,
        ``"late"`` or ``"invalid"``); one row per reading.

    The same on Spark Connect sessions (the server plugin plans the same query). Bad input fails
    before the query starts, naming the column or option:

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
    keys = _keys(key, "as_of_join")
    arguments = dict(reading_time=reading_time, version_time=version_time, lateness=_duration("lateness", lateness),
                     versions_delay=_duration("versions_delay", versions_delay))
    _check_name(name, "as_of_join")
    if _on_connect(readings, versions, "as_of_join"):
        from keyed_watermarks.connect import message
        from keyed_watermarks.connect.backend import ConnectBackend

        return ConnectBackend(readings).join(
            readings, versions, {"key": keys, **arguments, **_named(name)}, message.AS_OF_JOIN)
    entry = getattr(_jvm(readings), _SCALA_ENTRY)
    jdf = entry.fromPython(readings._jdf, versions._jdf, _java_list(readings, keys), *arguments.values(), name)
    return DataFrame(jdf, readings.sparkSession)


def interval_join(
    left: DataFrame,
    right: DataFrame,
    key: Union[str, Sequence[str]],
    left_time: str,
    right_time: str,
    before: Duration,
    after: Duration,
    lateness: Duration,
    how: str = "inner",
    name: Optional[str] = None,
) -> DataFrame:
    """Joins each left row to the right rows of its key whose ``right_time`` is at most
    ``before`` before and at most ``after`` after its ``left_time`` (both bounds included).
    Each side of a key has its own watermark, its max time minus ``lateness``: a row below its
    side's watermark is late, and a row leaves the join's state once the *other* side's
    watermark of its key is past every time it could match, never because other keys are ahead.

    :param left: a streaming DataFrame (e.g. readings).
    :param right: a streaming DataFrame with the same key columns (names and types), e.g. alarms.
    :param key: the key column name(s).
    :param left_time: the left side's event-time column (TIMESTAMP).
    :param right_time: the right side's event-time column (TIMESTAMP).
    :param before: how long before a left row's time a right row still matches it (>= 0).
    :param after: how long after a left row's time a right row still matches it (>= 0).
    :param lateness: each side's watermark per key is its max time minus this.
    :param how: ``"inner"`` (matched pairs) or ``"left_outer"`` (also each left row that never
        matched, once its key's right watermark is past ``left_time + after``).
    :param name: the join's name in its metrics, as for :func:`as_of_join`.
    :returns: a streaming DataFrame: the left side's columns, the right side's other than the
        keys, and ``join_status``: ``"joined"`` (a pair), ``"unmatched"`` (left outer: a left
        row with no match, right columns null), ``"late"`` or ``"invalid"`` (a null key or
        time; a row of one side alone, the other side's columns null but the keys set).

    The same on Spark Connect sessions (the server plugin plans the same query). Bad input fails
    before the query starts, naming the column or option:

    >>> readings = spark.readStream.format("rate").load().selectExpr(
    ...     "value % 3 AS device", "timestamp AS ts", "value AS temp")
    >>> alarms = spark.readStream.format("rate").load().selectExpr(
    ...     "value % 3 AS device", "timestamp AS raised_at", "CAST(value AS STRING) AS code")
    >>> joined = kw.interval_join(readings, alarms, key="device", left_time="ts", right_time="raised_at",
    ...                           before="1 minute", after="5 minutes", lateness="30 seconds", how="left_outer")
    >>> joined.columns
    ['device', 'ts', 'temp', 'raised_at', 'code', 'join_status']
    >>> kw.interval_join(readings, alarms, key="device", left_time="ts", right_time="raised_at",
    ...                  before="1 minute", after="5 minutes", lateness="30 seconds", how="outer")
    Traceback (most recent call last):
        ...
    pyspark.errors.exceptions.captured.IllegalArgumentException: how: expected 'inner' or 'left_outer', got 'outer'
    """
    keys = _keys(key, "interval_join")
    arguments = dict(left_time=left_time, right_time=right_time, before=_duration("before", before),
                     after=_duration("after", after), lateness=_duration("lateness", lateness), how=how)
    _check_name(name, "interval_join")
    if _on_connect(left, right, "interval_join"):
        from keyed_watermarks.connect import message
        from keyed_watermarks.connect.backend import ConnectBackend

        return ConnectBackend(left).join(left, right, {"key": keys, **arguments, **_named(name)}, message.INTERVAL_JOIN)
    entry = getattr(_jvm(left), _SCALA_INTERVAL_ENTRY)
    jdf = entry.fromPython(left._jdf, right._jdf, _java_list(left, keys), *arguments.values(), name)
    return DataFrame(jdf, left.sparkSession)


def _keys(key: Union[str, Sequence[str]], fn: str) -> List[str]:
    keys: List[str] = [key] if isinstance(key, str) else list(key)
    if not keys or not all(isinstance(k, str) for k in keys):
        raise PySparkTypeError(message=f"{fn}: key must be a column name or a list of names, got {key!r}")
    return keys


def _check_name(name: Optional[str], fn: str) -> None:
    if name is not None and not isinstance(name, str):
        raise PySparkTypeError(message=f"{fn}: name must be a string, got {name!r}")


def _named(name: Optional[str]) -> Dict[str, str]:
    """The ``name`` option of a join's Connect message: absent when none was given."""
    return {} if name is None else {"name": name}


def _on_connect(first: DataFrame, second: DataFrame, fn: str) -> bool:
    """Whether both sides are on a Spark Connect session (one side on each is refused)."""
    connect = is_connect(first.sparkSession)
    if connect != is_connect(second.sparkSession):
        raise PySparkTypeError(message=f"{fn}: both DataFrames must be of one session (one is of Spark Connect)")
    return connect


def _jvm(df: DataFrame) -> Any:
    python_api(df)  # the jar is on the session's classpath, else a clear error
    jvm = df.sparkSession.sparkContext._jvm
    assert jvm is not None
    return jvm


def _java_list(df: DataFrame, keys: List[str]) -> Any:
    jkeys = _jvm(df).java.util.ArrayList()
    for k in keys:
        jkeys.add(k)
    return jkeys
