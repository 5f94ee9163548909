"""The public API: ``keyed_watermark(...).window(...).agg(...)``."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from pyspark.errors import PySparkTypeError
from pyspark.sql import Column, DataFrame, functions as F

from keyed_watermarks import _contract
from keyed_watermarks._backend import backend

Duration = Union[str, datetime.timedelta]


def _duration(option: str, value: Optional[Duration]) -> Optional[str]:
    """A Spark duration string for a str or timedelta; the JVM parses and checks it."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return f"{micros} microseconds"
    raise PySparkTypeError(
        message=(
            f"{option}: expected a duration string such as '10 seconds' or a "
            f"datetime.timedelta, got {type(value).__name__}"
        )
    )


def _names(option: str, value: Union[str, Sequence[str]]) -> List[str]:
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else []
    if not names or not all(isinstance(n, str) and n for n in names):
        raise PySparkTypeError(
            message=f"{option}: expected a column name or a non-empty list of names, got {value!r}"
        )
    return names


def _bool(option: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PySparkTypeError(message=f"{option}: expected a bool, got {type(value).__name__}")
    return value


def _choice(option: str, value: Any) -> Optional[str]:
    """One of an option's names (the JVM checks which are known)."""
    if value is None or isinstance(value, str):
        return value
    raise PySparkTypeError(message=f"{option}: expected a string, got {type(value).__name__}")


def _drop_none(options: Mapping[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in options.items() if v is not None}


@dataclass(frozen=True)
class AdaptiveLateness:
    """Per-key lateness learnt from the key's own out-of-orderness.

    :param quantile: the quantile of the key's trail (how far its rows arrive behind its max
        event time) used as its lateness, in (0, 1]; e.g. 0.99.
    :param min: the smallest lateness it may learn (a duration).
    :param max: the largest lateness it may learn (a duration).
    :param relative_error: the sketch's rank error (exact while it holds fewer than
        ``1 / (2 * relative_error)`` values).

    A key's lateness is the ``quantile`` of how far its rows trail the key's max event time,
    kept in a bounded quantile sketch (Spark's ``QuantileSummaries`` with ``relative_error``),
    clamped to ``[min, max]``. The watermark never moves backward: a learnt lateness that
    would move it back is held and counted (`Semantics, "Watermark policies"
    <../semantics.html#watermark-policies-optional>`__).

    >>> wm = kw.keyed_watermark(events, key="device", event_time="ts", lateness="30 seconds",
    ...                         adaptive_lateness=kw.AdaptiveLateness(0.99, min="1 second",
    ...                                                               max="10 minutes"))
    >>> wm.window("1 minute").agg(F.count("*").alias("n")).columns
    ['device', 'window', 'n']
    """

    quantile: float = _contract.ADAPTIVE_QUANTILE
    min: Duration = _contract.ADAPTIVE_MIN
    max: Duration = _contract.ADAPTIVE_MAX
    relative_error: float = _contract.ADAPTIVE_RELATIVE_ERROR


class KeyedWindow:
    """Windows per key (tumbling, sliding or sessions). Build the result with :meth:`agg`."""

    def __init__(self, watermark: "KeyedWatermark", windows: Dict[str, Any]) -> None:
        self._watermark = watermark
        self._options = {**watermark._options, **windows}
        self._columns = dict(watermark._columns)
        self._backend = watermark._backend

    def _plan(self, cols: Sequence[Column], report: bool, keep_late_rows: bool = False) -> DataFrame:
        for c in cols:
            if not isinstance(c, Column):
                raise PySparkTypeError(
                    message=f"agg: expected pyspark Columns such as F.count('*'), got {type(c).__name__}"
                )
        options = {**self._options, "report": report, "keep_late_rows": keep_late_rows}
        return self._backend.plan(self._watermark._events, options, self._columns, list(cols))

    def agg(self, *cols: Column) -> DataFrame:
        """Aggregates each key's windows; emits a window when its key's watermark passes its end.

        :param cols: aggregate Columns, e.g. ``F.count("*").alias("n")``: Spark's built-in
            aggregates and expressions over them (no ``DISTINCT``, no ``FILTER``).
        :returns: a streaming DataFrame of one row per emitted window.

        The result has exactly the columns of
        ``events.groupBy(*keys, F.window(event_time, size)).agg(*cols)`` and is written in
        ``append`` output mode.

        >>> from pyspark.sql import functions as F
        >>> per_device = (kw.keyed_watermark(events, key="device", event_time="ts",
        ...                                  lateness="5 seconds")
        ...               .window("10 seconds")
        ...               .agg(F.count("*").alias("n"), F.avg("temp").alias("avg_temp")))
        >>> per_device.columns
        ['device', 'window', 'n', 'avg_temp']
        >>> per_device.isStreaming
        True
        """
        return self._plan(cols, report=False)

    def agg_with_report(self, *cols: Column, keep_late_rows: bool = False) -> DataFrame:
        """Like :meth:`agg`, plus report rows and columns.

        :param cols: aggregate Columns, as for :meth:`agg`.
        :param keep_late_rows: also emit every late and invalid row itself (``'late_row'`` and
            ``'invalid_row'`` rows with ``kw_late_row`` and ``kw_reason``).
        :returns: a streaming DataFrame of result rows and report rows (column ``kw_kind``).

        Adds ``kw_kind`` (``'window'`` for a result row, ``'late'`` for a per-key, per-batch
        count of late rows that were left out), ``kw_late_rows`` and ``kw_watermark`` (the
        key's watermark at the start of the micro-batch), and ``kw_regressions``: a
        ``'watermark'`` row counts the policy values that would have moved a key's watermark
        back, which are held instead (`Semantics, "Watermark policies" <../semantics.html#watermark-policies-optional>`__).

        With ``keep_late_rows=True`` every late row is emitted too, as a ``'late_row'`` row
        with ``kw_late_row`` (a struct of the input's original columns) and ``kw_reason``.
        Split the stream into results and late rows with :func:`keyed_watermarks.split_report`
        or write both from one query with :func:`keyed_watermarks.foreach_batch`:

        >>> report = (kw.keyed_watermark(events, key="device", event_time="ts",
        ...                              lateness="5 seconds")
        ...           .window("10 seconds")
        ...           .agg_with_report(F.count("*").alias("n"), keep_late_rows=True))
        >>> report.columns
        ['device', 'window', 'n', 'kw_kind', 'kw_late_rows', 'kw_watermark', 'kw_regressions',
         'kw_late_row', 'kw_reason']
        >>> writer = kw.foreach_batch(
        ...     results=lambda df, batch_id: df.write.mode("append").parquet("out/results"),
        ...     late_rows=lambda df, batch_id: df.write.mode("append").parquet("out/dead_letter"))
        >>> query_builder = (report.writeStream.foreachBatch(writer)
        ...                  .option("checkpointLocation", "out/checkpoint"))

        ``query_builder.start()`` starts it; a whole run, with its late and invalid rows in a
        dead-letter table: docs/guide/late-rows.md.
        """
        return self._plan(cols, report=True, keep_late_rows=_bool("keep_late_rows", keep_late_rows))


class KeyedWatermark:
    """Per-key event-time watermark over a streaming DataFrame.

    ``wm(key) = max event time seen for key - lateness``; see `Semantics <../semantics.html#per-key-watermark>`__. Built by
    :func:`keyed_watermark`, which converts its arguments (durations to Spark duration strings,
    names to lists); the JVM checks every option, with the same messages on classic and Spark
    Connect sessions.
    """

    _events: DataFrame
    _columns: Dict[str, Column]
    _options: Dict[str, Any]
    _backend: Any  # ClassicBackend or connect.backend.ConnectBackend

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise PySparkTypeError(message="KeyedWatermark: build it with kw.keyed_watermark(events, ...)")

    @classmethod
    def _from_options(cls, events: DataFrame, options: Dict[str, Any], columns: Dict[str, Column]) -> "KeyedWatermark":
        """The watermark of ``keyed_watermark``'s converted options, checked by the JVM at once."""
        self = cls.__new__(cls)
        self._events = events
        self._columns = columns
        self._options = options
        self._backend = backend(events)
        self._backend.validate_watermark(events, self._options, columns)
        return self

    def _windows(self, windows: Dict[str, Any], columns: Dict[str, Column]) -> KeyedWindow:
        window = KeyedWindow(self, windows)
        window._columns.update(columns)
        self._backend.validate_windows(self._events, windows, columns)
        return window

    def window(
        self,
        size: Duration,
        slide: Optional[Duration] = None,
        allowed_lateness: Optional[Duration] = None,
        emit: Optional[str] = None,
        accumulation: Optional[str] = None,
    ) -> KeyedWindow:
        """Windows of ``size`` per key: tumbling, or sliding every ``slide``.

        :param size: the window length, a duration (``"10 seconds"``, ``datetime.timedelta``).
        :param slide: for sliding windows, how often a window starts (default: ``size``, tumbling).
        :param allowed_lateness: how long a window stays in state after its key's watermark passes
            its end, firing a new ``revision`` for rows that still arrive (default: none).
        :param emit: when a window fires: ``"final"`` (default), ``"every_batch"`` or
            ``"every <duration>"`` (early panes).
        :param accumulation: what an early pane holds: ``"accumulating"`` (default),
            ``"discarding"`` or ``"retracting"``.

        Window bounds equal Spark's ``F.window(ts, size)`` / ``F.window(ts, size, slide)``.
        With sliding windows a row goes into each of its windows that is still open and
        counts as late only when all of them are closed.

        ``allowed_lateness`` keeps each window in state that much longer after its key's
        watermark passes its end: a row arriving meanwhile updates the window, which is
        emitted again as a new revision. The result then has an extra ``revision`` column
        (0 for the first firing); the last revision of a window is its final value.

        >>> sliding = (kw.keyed_watermark(events, key="device", event_time="ts",
        ...                               lateness="5 seconds")
        ...            .window("10 seconds", slide="5 seconds", allowed_lateness="1 minute")
        ...            .agg(F.count("*").alias("n")))
        >>> sliding.columns
        ['device', 'window', 'n', 'revision']

        ``emit`` says when a window fires: ``"final"`` (the default, as above),
        ``"every_batch"``: also an *early* pane at the end of every micro-batch that changed the
        window, before its key's watermark passes its end, or ``"every <duration>"`` (e.g.
        ``"every 10 seconds"``): early panes at most once per that much processing time per
        window (a change waits for a later micro-batch of its key, or for the on-time pane). Each result row then says which
        firing it is: ``kw_pane`` (``'early'``, ``'on_time'`` (exactly one per window, when
        the watermark passes its end) or ``'late'`` (within ``allowed_lateness``)) and
        ``kw_pane_index`` (0, 1, 2, ... per window; it replaces ``revision``).
        ``accumulation`` says what a pane holds: ``"accumulating"`` (the default: the whole
        window so far), ``"discarding"`` (only the rows since the window's previous pane; the
        panes of a window add up to its final value) or ``"retracting"`` (the whole window,
        after a row with ``kw_retraction`` true that repeats the previous pane, so that a sink
        that adds rows, subtracting retractions, stays right). Write it with
        ``outputMode("append")`` or ``outputMode("update")`` (each batch has at most one pane
        per window, its latest value); see
        `Semantics, "Panes and accumulation" <../semantics.html#panes-and-accumulation-emit-accumulation-optional>`__.

        >>> early = (kw.keyed_watermark(events, key="device", event_time="ts",
        ...                             lateness="5 seconds")
        ...          .window("1 minute", emit="every_batch", accumulation="retracting")
        ...          .agg(F.count("*").alias("n")))
        >>> early.columns
        ['device', 'window', 'n', 'kw_pane', 'kw_pane_index', 'kw_retraction']
        """
        window = _drop_none(
            {
                "size": _duration("window", size),
                "slide": _duration("slide", slide),
                "allowed_lateness": _duration("allowed_lateness", allowed_lateness),
                "emit": _choice("emit", emit),
                "accumulation": _choice("accumulation", accumulation),
            }
        )
        return self._windows({"window": window}, {})

    def session(
        self,
        gap: Union[Duration, Column],
        allowed_lateness: Optional[Duration] = None,
        emit: Optional[str] = None,
        accumulation: Optional[str] = None,
    ) -> KeyedWindow:
        """Session windows per key.

        :param gap: the session gap: a duration, or a Column of per-row gaps.
        :param allowed_lateness: how long a session stays in state after it fired (default: none).
        :param emit: as for :meth:`window`.
        :param accumulation: as for :meth:`window`.

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

        ``emit`` and ``accumulation`` as for :meth:`window`: with ``emit="every_batch"`` a
        session that grows is emitted again at the end of every micro-batch that changed it
        (an early pane), and its on-time pane fires when the key's watermark passes its end.
        A session's bounds change as it grows and sessions merge, so a sink that keeps one row
        per (key, session_window) would keep rows of sessions since replaced:
        ``accumulation="retracting"`` withdraws each replaced session's last pane (with its old
        bounds) in the batch of the pane that replaces it; see
        `Semantics, "Early panes of sessions" <../semantics.html#early-panes-of-sessions>`__.

        >>> sessions = (kw.keyed_watermark(events, key="device", event_time="ts",
        ...                                lateness="10 seconds")
        ...             .session(F.when(F.col("kind") == "batch", "10 minutes")
        ...                       .otherwise("30 seconds"))
        ...             .agg(F.count("*").alias("n")))
        >>> sessions.columns
        ['device', 'session_window', 'n']
        """
        options = {
            "allowed_lateness": _duration("allowed_lateness", allowed_lateness),
            "emit": _choice("emit", emit),
            "accumulation": _choice("accumulation", accumulation),
        }
        if isinstance(gap, Column):
            return self._windows({"session": _drop_none(options)}, {"gap": gap})
        return self._windows({"session": _drop_none({"gap": _duration("gap", gap), **options})}, {})


def keyed_watermark(
    events: DataFrame,
    key: Union[str, Sequence[str]],
    event_time: str,
    lateness: Duration,
    idle_timeout: Optional[Duration] = None,
    *,
    key_lateness: Union[Column, Mapping[str, Duration], None] = None,
    adaptive_lateness: Optional[AdaptiveLateness] = None,
    clock: Optional[str] = None,
    advance_when_idle: bool = False,
    max_skew: Optional[Duration] = None,
    closing: Optional[str] = None,
    source: Union[str, Column, None] = None,
    sources: Optional[Sequence[str]] = None,
    source_idle_timeout: Optional[Duration] = None,
    max_ahead: Optional[Duration] = None,
    stuck_after: Optional[Duration] = None,
    name: Optional[str] = None,
    dedup: Union[str, Sequence[str], None] = None,
    metrics: Optional[str] = None,
    arrival_time: Union[str, Column, None] = None,
    idle_clock: Optional[str] = None,
    real_time: bool = False,
) -> KeyedWatermark:
    """Per-key event-time watermarks over ``events`` (a streaming DataFrame).

    :param events: the streaming DataFrame of input rows (``spark.readStream...``).
    :param key: key column name or list of names (e.g. the device id).
    :param event_time: TIMESTAMP column with each row's event time.
    :param lateness: how far a key's watermark trails its max event time, as a Spark
        duration string (``"5 seconds"``) or ``datetime.timedelta``; the default for
        ``key_lateness``.
    :param idle_timeout: optional duration after which a silent key is idle: its open windows
        are emitted and its state dropped (or, with ``advance_when_idle``, its watermark
        advances with the idle clock, keeping the lag it had). Silence is measured on the
        stream's arrival clock (needs ``arrival_time``; outage-safe) unless
        ``idle_clock="processing_time"`` names the wall clock (see
        `Semantics, "Idle keys" <../semantics.html#idle-keys-idle-timeout-optional>`__).
    :param advance_when_idle: with ``idle_timeout``: keep an idle key's state and advance its
        watermark with the idle clock instead of emitting its windows at once (default
        ``False``).
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
        watermark (``withWatermark(event_time, lateness)``), for migration and A/B comparison;
        or ``"fleet"``: each key follows Spark's global watermark behind its own learnt skew
        (a key in step with the fleet closes with it, a delayed key keeps its lag; see
        `Semantics, "Fleet closing" <../semantics.html#watermark-policies-optional>`__), ``max_skew`` bounding the skew.
    :param source: min of inputs: a column naming each row's source (gateway, link); the
        watermark is kept per (key, source) and the key's is their minimum.
    :param sources: the sources every key must hear from before it has a watermark
        (default: the sources seen so far).
    :param source_idle_timeout: a source silent this long stops holding its key back.
    :param max_ahead: rows whose event time is further ahead of the micro-batch's processing time
        are invalid (counted, never aggregated; default one day; ``"unbounded"`` turns it off).
    :param stuck_after: the per-batch metric ``stuck_keys`` counts keys whose watermark trails
        Spark's global watermark by more than this (default 10 minutes; see :func:`metrics`).
    :param name: the stage's name, for a query with several keyed stages: its observed metrics
        are ``keyed_watermarks_input.<name>`` and ``keyed_watermarks_output.<name>``. Default:
        none for the query's first keyed stage (the plain names), the key columns joined with
        ``_`` for a later one (see
        `Semantics, "Keyed stages in a pipeline" <../semantics.html#keyed-stages-in-a-pipeline>`__).
    :param dedup: per-key deduplication, as Spark's ``dropDuplicatesWithinWatermark(dedup)``
        but on each key's own watermark: a row whose values of these columns (e.g. a packet
        id) its key already had within the key's horizon is dropped before aggregation and
        counted as ``duplicate_rows`` in :func:`metrics` (see
        `Semantics, "Deduplication" <../semantics.html#deduplication-dedup-columns-optional>`__).
        Key columns may not be listed (deduplication is per key already).
    :param arrival_time: the TIMESTAMP column (name or Column) of each row's arrival time, the
        clock of ``idle_timeout`` and ``source_idle_timeout``: e.g. Kafka's ``timestamp``, the file
        source's ``_metadata.file_modification_time`` or a column of your own. The fleet's clock is
        the max arrival time of the earlier micro-batches (Spark's watermark on it, kept in the
        checkpoint), so a query that was down or catches up decides as it would have live.
    :param idle_clock: the idle options' clock: ``"arrival"`` (default; needs ``arrival_time``) or
        ``"processing_time"``: the query's wall clock between micro-batches, not outage-safe (a
        query that was down, or reads a backlog, sees every key silent).
    :param metrics: what :func:`metrics` reports per micro-batch: ``"keys"`` (default) the
        output counts plus the per-key metrics (keys in the batch, new and released keys,
        watermark lag quantiles, stuck keys); ``"counts"`` only the counts (windows emitted,
        late rows, held watermarks), which costs less per micro-batch.
    :param real_time: plan the stage for Spark's real-time mode (``trigger(realTime=...)``, Spark
        4.3): no partial aggregation before the shuffle, and each row is checked against its key's
        watermark as it stands before that row, the windows the watermark then passes written at
        once (the record-at-a-time rule; it holds under any trigger). The watermark follows the
        key's own rows only: ``max_skew`` (default unbounded here), ``closing``, ``clock``, the
        idle options, ``dedup``, per-key metrics and early panes are refused (see
        `Semantics, "Real-time mode" <../semantics.html#real-time-mode-real-time-optional>`__).

    Bad input (unknown column, non-timestamp event time, bad or negative duration, options
    that cannot be combined) raises before any query starts.

    >>> import datetime
    >>> wm = kw.keyed_watermark(events, key="device", event_time="ts", lateness="10 seconds",
    ...                         key_lateness={"uploader-1": datetime.timedelta(minutes=10)})
    >>> wm.window("1 minute").agg(F.max("temp").alias("max_temp")).columns
    ['device', 'window', 'max_temp']
    >>> kw.keyed_watermark(events, key="device", event_time="temp", lateness="10 seconds")
    Traceback (most recent call last):
        ...
    pyspark.errors.exceptions.captured.IllegalArgumentException: event_time: column 'temp' must be
    of type TIMESTAMP, but it is DOUBLE; cast it first, e.g. F.col('temp').cast('timestamp')
    """
    if not isinstance(event_time, str) or not event_time:
        raise PySparkTypeError(message=f"event_time: expected a column name, got {event_time!r}")
    columns: Dict[str, Column] = {}
    mapping = None
    if isinstance(key_lateness, Column):
        columns["key_lateness"] = key_lateness
    elif isinstance(key_lateness, Mapping):
        mapping = {str(k): _duration(f"key_lateness[{k!r}]", d) for k, d in key_lateness.items()}
    elif key_lateness is not None:
        raise PySparkTypeError(
            message="key_lateness: expected a Column of durations or a dict of key -> duration, "
            f"got {type(key_lateness).__name__}"
        )
    adaptive = None
    if adaptive_lateness is not None:
        if not isinstance(adaptive_lateness, AdaptiveLateness):
            raise PySparkTypeError(message="adaptive_lateness: expected kw.AdaptiveLateness(...)")
        a = adaptive_lateness
        adaptive = {
            "quantile": a.quantile,
            "min": _duration("adaptive_lateness.min", a.min),
            "max": _duration("adaptive_lateness.max", a.max),
            "relative_error": a.relative_error,
        }
    if source is not None:
        if isinstance(source, str):
            source = F.col(source)
        if not isinstance(source, Column):
            raise PySparkTypeError(message="source: expected a column name or a Column")
        columns["source"] = source
    if arrival_time is not None:
        if isinstance(arrival_time, str):
            arrival_time = F.col(arrival_time)
        if not isinstance(arrival_time, Column):
            raise PySparkTypeError(message="arrival_time: expected a column name or a Column")
        columns["arrival_time"] = arrival_time
    if sources is not None:
        if isinstance(sources, str) or not all(isinstance(n, str) for n in sources):
            raise PySparkTypeError(message=f"sources: expected a list of strings, got {sources!r}")
        sources = list(sources) or None
    options = _drop_none(
        {
            "key": _names("key", key),
            "event_time": event_time,
            "lateness": _duration("lateness", lateness),
            "idle_timeout": _duration("idle_timeout", idle_timeout),
            "key_lateness": mapping,
            "adaptive_lateness": adaptive,
            "clock": clock,
            "advance_when_idle": _bool("advance_when_idle", advance_when_idle),
            "max_skew": _duration("max_skew", max_skew),
            "closing": closing,
            "sources": sources,
            "source_idle_timeout": _duration("source_idle_timeout", source_idle_timeout),
            "max_ahead": _duration("max_ahead", max_ahead),
            "stuck_after": _duration("stuck_after", stuck_after),
            "name": name,
            "dedup": None if dedup is None else _names("dedup", dedup),
            "metrics": metrics,
            "idle_clock": idle_clock,
            "real_time": _bool("real_time", real_time) or None,
        }
    )
    return KeyedWatermark._from_options(events, options, columns)
