"""The public API: ``keyed_watermark(...).window(...).agg(...)``."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Union

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


@dataclass(frozen=True)
class AdaptiveLateness:
    """Per-key lateness learnt from the key's own out-of-orderness (see docs/semantics.md).

    A key's lateness is the ``quantile`` of how far its rows trail the key's max event time,
    kept in a bounded quantile sketch (Spark's ``QuantileSummaries`` with ``relative_error``),
    clamped to ``[min, max]``. The watermark never moves backward: a learnt lateness that
    would move it back is held and counted.

    >>> kw.keyed_watermark(events, key="device", event_time="ts", lateness="30 seconds",
    ...                    adaptive_lateness=kw.AdaptiveLateness(0.99, min="1 second",
    ...                                                          max="10 minutes"))
    ... # doctest: +SKIP
    """

    quantile: float = 0.99
    min: Duration = "0 seconds"
    max: Duration = "1 hour"
    relative_error: float = 0.01


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
        *,
        key_lateness: Union[Column, Mapping[str, Duration], None] = None,
        adaptive_lateness: Optional[AdaptiveLateness] = None,
        clock: str = "event_time",
        advance_when_idle: bool = False,
        max_skew: Optional[Duration] = None,
        closing: str = "keyed",
        source: Union[str, Column, None] = None,
        sources: Optional[Sequence[str]] = None,
        source_idle_timeout: Optional[Duration] = None,
        max_ahead: Optional[Duration] = None,
        stuck_after: Optional[Duration] = None,
    ) -> None:
        keys = _names("key", key)
        if not isinstance(event_time, str) or not event_time:
            raise PySparkTypeError(
                message=f"event_time: expected a column name, got {event_time!r}"
            )
        if lateness is None:
            raise PySparkValueError(message="lateness: a duration is required, e.g. '5 seconds'")
        if clock not in ("event_time", "processing_time"):
            raise PySparkValueError(
                message=f"clock: expected 'event_time' or 'processing_time', got {clock!r}"
            )
        if closing not in ("keyed", "global"):
            raise PySparkValueError(message=f"closing: expected 'keyed' or 'global', got {closing!r}")
        if not isinstance(advance_when_idle, bool):
            raise PySparkTypeError(message="advance_when_idle: expected a bool")
        if key_lateness is not None and adaptive_lateness is not None:
            raise PySparkValueError(
                message="key_lateness and adaptive_lateness: choose one way to set per-key lateness"
            )
        if sources is not None and source is None:
            raise PySparkValueError(message="sources: needs the source column (source=...)")
        if source_idle_timeout is not None and source is None:
            raise PySparkValueError(message="source_idle_timeout: needs the source column (source=...)")
        jvm_facade = facade(events)
        jvm = events.sparkSession.sparkContext._jvm
        jkeys = jvm.java.util.ArrayList()
        for k in keys:
            jkeys.add(k)
        self._events = events
        jwm = jvm_facade.keyedWatermark(
            events._jdf, jkeys, event_time, _duration("lateness", lateness), None
        )
        if key_lateness is not None:
            if isinstance(key_lateness, Column):
                jwm = jwm.withLatenessColumn(key_lateness._jc)
            elif isinstance(key_lateness, Mapping):
                jmap = jvm.java.util.HashMap()
                for k, d in key_lateness.items():
                    jmap.put(str(k), _duration(f"key_lateness[{k!r}]", d))
                jwm = jvm_facade.latenessMapping(jwm, jmap)
            else:
                raise PySparkTypeError(
                    message="key_lateness: expected a Column of durations or a dict of key -> duration, "
                    f"got {type(key_lateness).__name__}"
                )
        if adaptive_lateness is not None:
            if not isinstance(adaptive_lateness, AdaptiveLateness):
                raise PySparkTypeError(message="adaptive_lateness: expected kw.AdaptiveLateness(...)")
            a = adaptive_lateness
            jwm = jwm.withAdaptiveLateness(
                float(a.quantile), _duration("min", a.min), _duration("max", a.max), float(a.relative_error)
            )
        if clock == "processing_time":
            jwm = jwm.withProcessingTime()
        if idle_timeout is not None:
            jwm = jwm.withIdleTimeout(_duration("idle_timeout", idle_timeout), advance_when_idle)
        elif advance_when_idle:
            raise PySparkValueError(message="advance_when_idle: needs idle_timeout")
        if max_skew is not None:
            jwm = jwm.withMaxSkew(_duration("max_skew", max_skew))
        if closing == "global":
            jwm = jwm.withGlobalClosing()
        if source is not None:
            from pyspark.sql import functions as F

            source_col = F.col(source) if isinstance(source, str) else source
            if not isinstance(source_col, Column):
                raise PySparkTypeError(message="source: expected a column name or a Column")
            jexpected = jvm.java.util.ArrayList()
            for name in sources or []:
                if not isinstance(name, str):
                    raise PySparkTypeError(message=f"sources: expected strings, got {name!r}")
                jexpected.add(name)
            jwm = jvm_facade.sources(
                jwm, source_col._jc, jexpected, _duration("source_idle_timeout", source_idle_timeout)
            )
        if max_ahead is not None:
            jwm = jwm.withMaxAhead(_duration("max_ahead", max_ahead))
        if stuck_after is not None:
            jwm = jwm.withStuckAfter(_duration("stuck_after", stuck_after))
        self._jwatermark = jwm

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

    def session(
        self, gap: Union[Duration, Column], allowed_lateness: Optional[Duration] = None
    ) -> KeyedWindow:
        """Session windows per key.

        A key's rows less than ``gap`` apart (in event time) form one session
        ``[first event, last event + gap)``, with the bounds of Spark's
        ``F.session_window(ts, gap)``; sessions merge as rows arrive, across micro-batches, and a
        session is emitted when its key's watermark passes its end. A row is late when its
        event time is at or behind its key's watermark (minus ``allowed_lateness``) at the start
        of the micro-batch. The result has the columns of
        ``events.groupBy(*keys, F.session_window(ts, gap)).agg(...)``.

        ``gap`` is a duration, or a Column for a per-row gap of the types ``session_window``
        accepts (strings such as ``"5 minutes"``, calendar intervals; anything else raises
        before the query starts). Each row's session ends at ``ts + gap`` computed as Spark
        does, so day and month gaps follow the session time zone's calendar. Rows whose
        session would not end after they start (null, unparsable or non-positive gap) are
        invalid (Spark drops them): counted as ``invalid_gap_rows`` and, with
        ``keep_late_rows``, returned as ``'invalid_row'`` rows.

        ``allowed_lateness`` keeps a session that long after it fired: rows that still merge
        into it make it fire again, as the next ``revision``, when it is due.

        >>> sessions = (kw.keyed_watermark(events, key="device", event_time="ts",
        ...                                lateness="10 seconds")
        ...             .session(F.when(F.col("kind") == "batch", "10 minutes")
        ...                       .otherwise("30 seconds"))
        ...             .agg(F.count("*").alias("n")))  # doctest: +SKIP
        """
        if gap is None:
            raise PySparkValueError(message="gap: a duration is required, e.g. '30 seconds'")
        allowed = _duration("allowed_lateness", allowed_lateness)
        jvm_facade = facade(self._events)
        if isinstance(gap, Column):
            jwindow = jvm_facade.session(self._jwatermark, gap._jc, allowed)
        else:
            jwindow = jvm_facade.session(self._jwatermark, _duration("gap", gap), allowed)
        return KeyedWindow(jwindow, self._events)


def keyed_watermark(
    events: DataFrame,
    key: Union[str, Sequence[str]],
    event_time: str,
    lateness: Duration,
    idle_timeout: Optional[Duration] = None,
    *,
    key_lateness: Union[Column, Mapping[str, Duration], None] = None,
    adaptive_lateness: Optional[AdaptiveLateness] = None,
    clock: str = "event_time",
    advance_when_idle: bool = False,
    max_skew: Optional[Duration] = None,
    closing: str = "keyed",
    source: Union[str, Column, None] = None,
    sources: Optional[Sequence[str]] = None,
    source_idle_timeout: Optional[Duration] = None,
    max_ahead: Optional[Duration] = None,
    stuck_after: Optional[Duration] = None,
) -> KeyedWatermark:
    """Per-key event-time watermarks over ``events`` (a streaming DataFrame).

    :param key: key column name or list of names (e.g. the device id).
    :param event_time: TIMESTAMP column with each row's event time.
    :param lateness: how far a key's watermark trails its max event time, as a Spark
        duration string (``"5 seconds"``) or ``datetime.timedelta``; the default for
        ``key_lateness``.
    :param idle_timeout: optional processing-time duration after which a silent key is idle:
        its open windows are emitted and its state dropped (or, with ``advance_when_idle``,
        its watermark advances with the wall clock, keeping the lag it had).
    :param key_lateness: per-key lateness: a Column of durations (null: ``lateness``) or a
        dict ``{key value: duration}`` for a single key column.
    :param adaptive_lateness: learn each key's lateness from its out-of-orderness
        (:class:`AdaptiveLateness`).
    :param clock: ``"event_time"`` (default) or ``"processing_time"``
        (``wm(key) = processing time - lateness``).
    :param max_skew: hold each key's watermark at most this far behind Spark's global watermark
        (default: one hour, unless a processing-time policy or ``closing="global"`` is used);
        a key whose windows all closed leaves state. ``"unbounded"`` turns the bound off.
    :param closing: ``"keyed"`` (default) or ``"global"``: every key uses Spark's global
        watermark (``withWatermark(event_time, lateness)``), for migration and A/B comparison.
    :param source: min of inputs: a column naming each row's source (gateway, link); the
        watermark is kept per (key, source) and the key's is their minimum.
    :param sources: the sources every key must hear from before it has a watermark
        (default: the sources seen so far).
    :param source_idle_timeout: a source silent this long stops holding its key back.
    :param max_ahead: rows whose event time is further ahead of the micro-batch's processing time
        are invalid (counted, never aggregated; default one day; ``"unbounded"`` turns it off).
    :param stuck_after: the per-batch metric ``stuck_keys`` counts keys whose watermark trails
        Spark's global watermark by more than this (default 10 minutes; see :func:`metrics`).

    Bad input (unknown column, non-timestamp event time, bad or negative duration, options
    that cannot be combined) raises before any query starts.

    >>> wm = kw.keyed_watermark(events, key="device", event_time="ts", lateness="10 seconds",
    ...                         key_lateness={"uploader-1": "10 minutes"})  # doctest: +SKIP
    """
    return KeyedWatermark(
        events,
        key,
        event_time,
        lateness,
        idle_timeout,
        key_lateness=key_lateness,
        adaptive_lateness=adaptive_lateness,
        clock=clock,
        advance_when_idle=advance_when_idle,
        max_skew=max_skew,
        closing=closing,
        source=source,
        sources=sources,
        source_idle_timeout=source_idle_timeout,
        max_ahead=max_ahead,
        stuck_after=stuck_after,
    )
