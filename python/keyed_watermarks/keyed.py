"""The public API: ``keyed_watermark(...).window(...).agg(...)``."""

from __future__ import annotations

import datetime
from typing import Any, List, Optional, Sequence, Union

from pyspark.errors import PySparkTypeError, PySparkValueError
from pyspark.sql import Column, DataFrame

from keyed_watermarks._jvm import facade

Duration = Union[str, datetime.timedelta]


def _duration(option: str, value: Optional[Duration]) -> Optional[str]:
    """Spark duration string for a str or timedelta (validated in the JVM by Spark's parser)."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        if micros < 0:
            raise PySparkValueError(message=f"{option}: must not be negative, got {value!r}")
        return f"{micros} microseconds"
    if isinstance(value, str):
        return value
    raise PySparkTypeError(
        message=(
            f"{option}: expected a duration string such as '10 seconds' or a "
            f"datetime.timedelta, got {type(value).__name__}"
        )
    )


def _names(option: str, value: Union[str, Sequence[str]]) -> List[str]:
    if isinstance(value, str):
        names = [value]
    elif isinstance(value, (list, tuple)):
        names = list(value)
    else:
        names = []
    if not names or not all(isinstance(n, str) and n for n in names):
        raise PySparkTypeError(
            message=f"{option}: expected a column name or a non-empty list of names, got {value!r}"
        )
    return names


class KeyedWindow:
    """Tumbling or sliding windows per key. Build the result with :meth:`agg`."""

    def __init__(self, jwindow: Any, events: DataFrame) -> None:
        self._jwindow = jwindow
        self._events = events

    def _agg(self, cols: Sequence[Column], report: bool, keep_late_rows: bool = False) -> DataFrame:
        if not cols:
            raise PySparkValueError(message="agg: at least one aggregate column is required")
        for c in cols:
            if not isinstance(c, Column):
                raise PySparkTypeError(
                    message=f"agg: expected pyspark Columns such as F.count('*'), got {type(c).__name__}"
                )
        spark = self._events.sparkSession
        sc = spark.sparkContext
        jcols = sc._jvm.java.util.ArrayList()
        for c in cols:
            jcols.add(c._jc)
        jdf = facade(self._events).agg(self._jwindow, jcols, report, keep_late_rows)
        return DataFrame(jdf, spark)

    def agg(self, *cols: Column) -> DataFrame:
        """Aggregates each key's windows; emits a window when its key's watermark passes its end.

        The result has exactly the columns of
        ``events.groupBy(*keys, F.window(event_time, size)).agg(*cols)`` and is written in
        ``append`` output mode.

        >>> from pyspark.sql import functions as F
        >>> per_device = (kw.keyed_watermark(events, key="device", event_time="ts",
        ...                                  lateness="5 seconds")
        ...               .window("10 seconds")
        ...               .agg(F.count("*").alias("n"), F.avg("temp").alias("avg_temp")))
        ... # doctest: +SKIP
        """
        return self._agg(cols, report=False)

    def agg_with_report(self, *cols: Column, keep_late_rows: bool = False) -> DataFrame:
        """Like :meth:`agg`, plus report rows and columns.

        Adds ``kw_kind`` (``'window'`` for a result row, ``'late'`` for a per-key, per-batch
        count of late rows that were left out), ``kw_late_rows`` and ``kw_watermark`` (the
        key's watermark at the start of the micro-batch).

        With ``keep_late_rows=True`` every late row is emitted too, as a ``'late_row'`` row
        with ``kw_late_row`` (a struct of the input's original columns) and ``kw_reason``.
        Split the stream into results and late rows with :func:`keyed_watermarks.split_report`
        or write both from one query with :func:`keyed_watermarks.foreach_batch`:

        >>> report = (kw.keyed_watermark(events, key="device", event_time="ts",
        ...                              lateness="5 seconds")
        ...           .window("10 seconds")
        ...           .agg_with_report(F.count("*").alias("n"), keep_late_rows=True))
        >>> query = report.writeStream.foreachBatch(kw.foreach_batch(
        ...     results=lambda df, batch_id: df.write.mode("append").parquet(results_path),
        ...     late_rows=lambda df, batch_id: df.write.mode("append").parquet(dead_letter_path),
        ... )).start()  # doctest: +SKIP
        """
        if not isinstance(keep_late_rows, bool):
            raise PySparkTypeError(
                message=f"keep_late_rows: expected a bool, got {type(keep_late_rows).__name__}"
            )
        return self._agg(cols, report=True, keep_late_rows=keep_late_rows)


class KeyedWatermark:
    """Per-key event-time watermark over a streaming DataFrame.

    ``wm(key) = max event time seen for key - lateness``; see docs/semantics.md.
    """

    def __init__(
        self,
        events: DataFrame,
        key: Union[str, Sequence[str]],
        event_time: str,
        lateness: Duration,
        idle_timeout: Optional[Duration] = None,
    ) -> None:
        keys = _names("key", key)
        if not isinstance(event_time, str) or not event_time:
            raise PySparkTypeError(
                message=f"event_time: expected a column name, got {event_time!r}"
            )
        if lateness is None:
            raise PySparkValueError(message="lateness: a duration is required, e.g. '5 seconds'")
        jvm_facade = facade(events)
        jkeys = events.sparkSession.sparkContext._jvm.java.util.ArrayList()
        for k in keys:
            jkeys.add(k)
        self._events = events
        self._jwatermark = jvm_facade.keyedWatermark(
            events._jdf,
            jkeys,
            event_time,
            _duration("lateness", lateness),
            _duration("idle_timeout", idle_timeout),
        )

    def window(
        self,
        size: Duration,
        slide: Optional[Duration] = None,
        allowed_lateness: Optional[Duration] = None,
    ) -> KeyedWindow:
        """Windows of ``size`` per key: tumbling, or sliding every ``slide``.

        Window bounds equal Spark's ``F.window(ts, size)`` / ``F.window(ts, size, slide)``.
        With sliding windows a row goes into each of its windows that is still open and
        counts as late only when all of them are closed.

        ``allowed_lateness`` keeps each window in state that much longer after its key's
        watermark passes its end: a row arriving meanwhile updates the window, which is
        emitted again as a new revision. The result then has an extra ``revision`` column
        (0 for the first firing); the last revision of a window is its final value.
        """
        if size is None:
            raise PySparkValueError(message="window: a size is required, e.g. '10 seconds'")
        jwindow = self._jwatermark.window(
            _duration("window", size),
            _duration("slide", slide),
            _duration("allowed_lateness", allowed_lateness),
        )
        return KeyedWindow(jwindow, self._events)

    def session(self, gap: Duration) -> KeyedWindow:
        """Session windows per key with a fixed ``gap``.

        A key's rows less than ``gap`` apart (in event time) form one session
        ``[first event, last event + gap)``, with the bounds of Spark's
        ``F.session_window(ts, gap)``; sessions merge as rows arrive, across micro-batches, and a
        session is emitted once, when its key's watermark passes its end. A row is late when its
        event time is at or behind its key's watermark at the start of the micro-batch.
        The result has the columns of ``events.groupBy(*keys, F.session_window(ts, gap)).agg(...)``.
        """
        if gap is None:
            raise PySparkValueError(message="gap: a duration is required, e.g. '30 seconds'")
        return KeyedWindow(self._jwatermark.session(_duration("gap", gap)), self._events)


def keyed_watermark(
    events: DataFrame,
    key: Union[str, Sequence[str]],
    event_time: str,
    lateness: Duration,
    idle_timeout: Optional[Duration] = None,
) -> KeyedWatermark:
    """Per-key event-time watermarks over ``events`` (a streaming DataFrame).

    :param key: key column name or list of names (e.g. the device id).
    :param event_time: TIMESTAMP column with each row's event time.
    :param lateness: how far a key's watermark trails its max event time, as a Spark
        duration string (``"5 seconds"``) or ``datetime.timedelta``.
    :param idle_timeout: optional processing-time duration after which a silent key's open
        windows are emitted and its state dropped.

    Bad input (unknown column, non-timestamp event time, bad or negative duration) raises
    before any query starts.
    """
    return KeyedWatermark(events, key, event_time, lateness, idle_timeout)
