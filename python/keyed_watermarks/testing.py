"""A test kit for your own keyed queries: feed micro-batches of rows for many keys, with
processing times, and check what each batch emits (windows and panes, late rows, watermarks,
per-key metrics), in memory and without a streaming query, so that a property test can run
hundreds of cases.

Build the keyed part of your job in a function that returns the :class:`~keyed_watermarks.KeyedWindow`
(everything before ``.agg``), use it in the job, and hand it with the aggregates to
:class:`KeyedQueryTester` in the test. Every micro-batch is planned as in a streaming query (the
same input checks, window assignment and partial aggregation) and its partials go to the keyed
operator, one key at a time, over Spark's in-memory state store and timers (Spark's
``TwsTester``; pyspark 4.2 or later, on a classic SparkSession). Spark's own ``TwsTester`` runs a
processor one key at a time, so a watermark across keys (``max_skew``, ``closing``) cannot be
tested with it; this kit can: it keeps Spark's global watermark as a query does.

>>> import datetime
>>> from pyspark.sql import functions as F
>>> from keyed_watermarks.testing import KeyedQueryTester
>>> def per_device(events):
...     return (kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds")
...             .window("10 seconds"))
>>> from keyed_watermarks.testing import empty_stream
>>> events = empty_stream(spark, "device STRING, ts TIMESTAMP, temp DOUBLE")
>>> t = lambda s: datetime.datetime(2024, 1, 1, 0, 0, s)
>>> tester = KeyedQueryTester(per_device(events), F.count("*").alias("n"))
>>> first = tester.step([("a", t(1), 1.0), ("a", t(4), 3.0), ("b", t(2), 5.0)])
>>> first.windows
[]
>>> second = tester.step([("a", t(12), 2.0), ("a", t(27), 2.0), ("b", t(19), 1.0)])
>>> sorted((r.device, r.window.start.second, r.n) for r in second.windows)
[('a', 0, 2), ('a', 10, 1), ('b', 0, 1)]
>>> third = tester.step([("a", t(3), 9.0), ("b", t(11), 4.0)])
>>> third.late  # a's watermark is 22 s (27 s - 5 s): its row at 3 s is late; b's is not
{'a': 1}
>>> [(r.device, r.ts.second) for r in third.late_rows]
[('a', 3)]

``events`` there is any streaming DataFrame with the input's schema (the job's own source, or
:func:`empty_stream`): only its schema and session are used.

Not covered (they need a streaming query; test them end to end): restarts from a checkpoint,
a ``withWatermark`` or stateful operator upstream of the keyed stage, rows that cannot be
aggregated (a null key or event time: left out of the windows as in a query, but not listed
here), and Spark's query progress (``kw.metrics`` reads it; each :class:`Batch` has the
operator's per-key metrics instead).
"""

from __future__ import annotations

import datetime
import decimal
import json
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from pyspark.errors import PySparkTypeError, PySparkValueError
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    DecimalType,
    MapType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from keyed_watermarks._jvm import is_connect, python_api
from keyed_watermarks.keyed import KeyedWindow

__all__ = ["KeyedQueryTester", "Batch", "empty_stream"]

_TESTER = "io.github.keyedwatermarks.testing.KeyedQueryTester"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

#: A processing time: an aware or naive :class:`datetime.datetime` (naive ones in local time,
#: as pyspark reads them), or milliseconds since the epoch.
ProcessingTime = Union[datetime.datetime, int]


@dataclass
class Batch:
    """What one micro-batch emitted.

    :param index: the batch's number, from 0.
    :param processing_time: the batch's processing time (ms since the epoch).
    :param watermark: Spark's global watermark the batch ran with (a datetime; ``None`` while
        Spark has none). It drives ``max_skew`` and ``closing`` (see the contract, "Watermark
        policies").
    :param windows: the result rows the batch emitted (windows, or panes with ``emit``), with
        exactly the columns of ``.agg(...)``, as :class:`pyspark.sql.Row`, in emission order.
    :param late: per key (a value, or a tuple for several key columns), how many of the
        batch's rows were late and left out.
    :param late_rows: the late rows themselves (the input's columns), as Rows.
    :param held: per key, ``(count, watermark)`` of policy values that would have moved the
        key's watermark back and were held instead.
    :param watermarks: per key with a row in the output, its watermark at the start of the
        batch (the ``kw_watermark`` of its report rows).
    :param metrics: the batch's per-key metrics by name (keys seen, lag percentiles, ...), as
        the operator computed them; ``None`` when the batch touched no key.
    :param rows: every output row as a dict (the report's columns included), for anything else.
    """

    index: int
    processing_time: int
    watermark: Optional[datetime.datetime]
    windows: List[Row] = field(default_factory=list)
    late: dict = field(default_factory=dict)
    late_rows: List[Row] = field(default_factory=list)
    held: dict = field(default_factory=dict)
    watermarks: dict = field(default_factory=dict)
    metrics: Optional[dict] = None
    rows: list = field(default_factory=list)


def empty_stream(spark: SparkSession, schema: Union[str, StructType]) -> DataFrame:
    """A streaming DataFrame with ``schema`` and no data, to build the query under test on.

    :param spark: a classic session made by ``kw.configure``.
    :param schema: the input's schema, as a DDL string or a StructType.
    :returns: a file stream over a new, empty temporary directory (never started by the kit).

    >>> from keyed_watermarks.testing import empty_stream
    >>> empty_stream(spark, "device STRING, ts TIMESTAMP, temp DOUBLE").isStreaming
    True
    """
    return spark.readStream.schema(schema).parquet(tempfile.mkdtemp(prefix="kw-test-kit-"))


class KeyedQueryTester:
    """Runs a keyed query in memory, micro-batch by micro-batch.

    :param query: the keyed windows of the query under test: what
        ``kw.keyed_watermark(events, ...).window(...)`` (or ``.session(...)``) returns, before
        ``.agg``. Its options are used exactly as the query would use them; ``events`` (a
        streaming DataFrame, e.g. :func:`empty_stream`) needs only the input's schema.
    :param aggs: the aggregate columns, as given to ``.agg``.
    :param start: the processing time of the first batch (default: 1 s after the epoch); each
        :meth:`step` without ``processing_time`` is one second after the previous batch.

    Errors: ``PySparkTypeError`` if ``query`` is not a KeyedWindow; ``PySparkRuntimeError`` on a
    Spark Connect session (the kit needs a classic session) or without the keyed-watermarks jar;
    the query's own ``IllegalArgumentException`` for a bad option; on pyspark 4.0 and 4.1 (no
    ``TwsTester``) an error that says so.

    >>> from keyed_watermarks.testing import KeyedQueryTester
    >>> tester = KeyedQueryTester(
    ...     kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds",
    ...                        max_skew="unbounded").window("10 seconds"),
    ...     F.sum("temp").alias("total"))
    >>> tester.time_mode
    'NoTime'
    """

    def __init__(self, query: KeyedWindow, *aggs: Column, start: ProcessingTime = 1000) -> None:
        if not isinstance(query, KeyedWindow):
            raise PySparkTypeError(
                message="KeyedQueryTester: query must be what kw.keyed_watermark(events, ...).window(...) "
                f"or .session(...) returns (before .agg), got {type(query).__name__}"
            )
        for c in aggs:
            if not isinstance(c, Column):
                raise PySparkTypeError(
                    message=f"KeyedQueryTester: expected pyspark Columns such as F.count('*'), got {type(c).__name__}"
                )
        events = query._watermark._events
        if is_connect(events.sparkSession):
            from pyspark.errors import PySparkRuntimeError

            raise PySparkRuntimeError(
                message="keyed_watermarks.testing runs the operator in the driver's JVM: use a classic "
                "SparkSession (kw.configure(SparkSession.builder)), not Spark Connect"
            )
        python_api(events)  # checks that the jar is on the session's classpath
        self._schema: StructType = events.schema
        self._result = query.agg(*aggs).schema
        self._keys = list(query._options["key"])
        options = {**query._options, "report": True, "keep_late_rows": True}
        jvm: Any = events.sparkSession.sparkContext._jvm  # py4j's JVMView (Optional in pyspark's hints)
        jcolumns = jvm.java.util.HashMap()
        for name, c in query._columns.items():
            jcolumns.put(name, c._jc)
        jaggs = jvm.java.util.ArrayList()
        for c in aggs:
            jaggs.add(c._jc)
        cls = getattr(jvm, _TESTER)
        self._jtester = cls(events._jdf, json.dumps(options), jcolumns, jaggs)
        self._next_time = _millis(start)
        self._batches: List[Batch] = []

    @property
    def time_mode(self) -> str:
        """The operator's timers: ``'NoTime'``, ``'EventTime'`` (``max_skew``, ``closing``) or
        ``'ProcessingTime'`` (``idle_timeout``), as ``transformWithState`` would run it."""
        return self._jtester.timeModeName()

    @property
    def batches(self) -> List[Batch]:
        """Every batch run so far."""
        return list(self._batches)

    @property
    def watermark(self) -> Optional[datetime.datetime]:
        """Spark's global watermark the next batch runs with (``None`` while it has none)."""
        return _timestamp(self._jtester.globalWatermarkMs() * 1000 or None)

    def step(self, rows: Iterable[Sequence[Any]] = (), processing_time: Optional[ProcessingTime] = None) -> Batch:
        """Runs one micro-batch and returns what it emitted.

        :param rows: the batch's rows as tuples (or Rows) in the input schema's column order,
            values as for ``spark.createDataFrame`` (datetimes for timestamps). No rows: a
            no-data batch, in which only timers act (Spark runs one when the global watermark
            moved and no data is waiting, or on a processing-time trigger).
        :param processing_time: the batch's processing time: a datetime or ms since the epoch;
            it must not go back. Default: one second after the previous batch.

        A row of the wrong length or a processing time that goes back raises ``PySparkValueError``.
        """
        width = len(self._schema.fields)
        internal = []
        for r in rows:
            values = list(r)
            if len(values) != width:
                raise PySparkValueError(
                    message=f"rows: each row needs {width} values ({', '.join(self._schema.names)}), got {r!r}"
                )
            internal.append([_to_json(f.dataType, v) for f, v in zip(self._schema.fields, values)])
        now = self._next_time if processing_time is None else _millis(processing_time)
        if self._batches and now < self._batches[-1].processing_time:
            raise PySparkValueError(
                message=f"processing_time: {now} ms goes back from the previous batch's "
                f"{self._batches[-1].processing_time} ms"
            )
        self._next_time = now + 1000
        out = json.loads(self._jtester.step(json.dumps(internal), int(now)))
        batch = self._batch(len(self._batches), now, out)
        self._batches.append(batch)
        return batch

    def run(
        self,
        batches: Iterable[Iterable[Sequence[Any]]],
        processing_times: Optional[Sequence[ProcessingTime]] = None,
        drain: bool = True,
    ) -> List[Batch]:
        """Runs several micro-batches, as a query reading them one per trigger would.

        :param batches: each batch's rows (see :meth:`step`).
        :param processing_times: each batch's processing time (default: one second apart).
        :param drain: after the last batch, run the no-data batch Spark runs when the global
            watermark moved in it (what ``Trigger.AvailableNow`` does at the end of the input).
        :returns: the batches run, the no-data batch included.
        """
        batches = [list(b) for b in batches]
        if processing_times is not None and len(processing_times) != len(batches):
            raise PySparkValueError(
                message=f"processing_times: {len(processing_times)} times for {len(batches)} batches"
            )
        out = [self.step(b, None if processing_times is None else processing_times[i]) for i, b in enumerate(batches)]
        if drain and out and self._jtester.globalWatermarkMs() * 1000 > _micros(out[-1].watermark):
            out.append(self.step([]))
        return out

    def _batch(self, index: int, now: int, out: Dict[str, Any]) -> Batch:
        batch = Batch(index, now, _timestamp(out["watermark"] * 1000 or None), metrics=out["metrics"],
                      rows=out["rows"])
        for r in out["rows"]:
            kind = r.get("kw_kind")
            key = self._key(r)
            if r.get("kw_watermark") is not None and key is not None:
                batch.watermarks[key] = _timestamp(r["kw_watermark"])
            if kind == "window":
                batch.windows.append(_row(self._result, r))
            elif kind == "late":
                batch.late[key] = batch.late.get(key, 0) + r["kw_late_rows"]
            elif kind == "late_row":
                batch.late_rows.append(_row(self._schema, r["kw_late_row"]))
            elif kind == "watermark":
                batch.held[key] = (r["kw_regressions"], _timestamp(r["kw_watermark"]))
        return batch

    def _key(self, r: Dict[str, Any]) -> Any:
        if any(k not in r for k in self._keys):
            return None
        values = tuple(_from_json(self._result[k].dataType, r[k]) for k in self._keys)
        return values[0] if len(values) == 1 else values


def _millis(t: ProcessingTime) -> int:
    if isinstance(t, datetime.datetime):
        return TimestampType().toInternal(t) // 1000
    if isinstance(t, int) and not isinstance(t, bool):
        return t
    raise PySparkTypeError(message=f"processing_time: a datetime or ms since the epoch, got {type(t).__name__}")


def _micros(t: Optional[datetime.datetime]) -> int:
    return 0 if t is None else TimestampType().toInternal(t)


def _timestamp(micros: Optional[int]) -> Optional[datetime.datetime]:
    return None if micros is None else TimestampType().fromInternal(micros)


def _to_json(t: DataType, v: Any) -> Any:
    """A Python value as the JVM tester reads it (timestamps in micros, dates in days)."""
    if v is None:
        return None
    if isinstance(t, (TimestampType, TimestampNTZType, DateType)):
        return t.toInternal(v)
    if isinstance(t, DecimalType):
        return str(v)
    return v


def _from_json(t: DataType, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(t, (TimestampType, TimestampNTZType, DateType)):
        return t.fromInternal(v)
    if isinstance(t, DecimalType):
        return decimal.Decimal(v)
    if isinstance(t, StructType):
        return _row(t, v)
    if isinstance(t, ArrayType):
        return [_from_json(t.elementType, x) for x in v]
    if isinstance(t, MapType):
        return {k: _from_json(t.valueType, x) for k, x in v.items()}
    return v


def _row(schema: StructType, values: Dict[str, Any]) -> Row:
    """A JSON object of the tester as a Row of ``schema`` (its fields, in its order)."""
    r = Row(*schema.names)
    return r(*[_from_json(f.dataType, values.get(f.name)) for f in schema.fields])
