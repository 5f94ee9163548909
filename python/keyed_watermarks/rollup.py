"""``rollup``: a keyed stage over a keyed stage's windows, re-keyed (device -> site -> fleet)."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from pyspark.errors import PySparkTypeError
from pyspark.sql import Column, DataFrame, functions as F

from keyed_watermarks.keyed import Duration, KeyedWatermark, keyed_watermark

#: The rollup's event time: the start of each upstream window (docs/semantics.md).
ROLLUP_TIME = "window_start"


def _source(windows: DataFrame, source: Union[str, Sequence[str]]) -> Column:
    names = [source] if isinstance(source, str) else list(source) if isinstance(source, (list, tuple)) else []
    if not names or not all(isinstance(n, str) and n for n in names):
        raise PySparkTypeError(message=f"source: expected the upstream key column(s), got {source!r}")
    if len(names) == 1:
        return windows[names[0]]
    # A composite upstream key as one source value; JSON keeps "a|b" + "c" apart from "a" + "b|c".
    return F.to_json(F.array(*[windows[n].cast("string") for n in names]))


def rollup(
    windows: DataFrame,
    key: Union[str, Sequence[str]],
    source: Union[str, Sequence[str]],
    lateness: Duration = "0 seconds",
    *,
    name: Optional[str] = None,
    **options: Any,
) -> KeyedWatermark:
    """Rolls a keyed stage's windows up per another key, in the same query, each key held back
    by the slowest of its upstream keys.

    :param windows: the output of a keyed stage (``keyed_watermark(...).window(...).agg(...)``)
        with the new key column(s) joined on.
    :param key: the new key column name or names (e.g. ``"site"``).
    :param source: the upstream key column(s) (e.g. ``"device"``): the inputs whose minimum holds
        the new key's watermark.
    :param lateness: the new stage's lateness (default ``"0 seconds"``).
    :param name: the stage's name in the metrics (default: the key columns joined with ``_``).
    :param options: other keyword options of :func:`keyed_watermark`.

    ``windows`` is the output of ``keyed_watermark(...).window(...).agg(...)`` (with a ``window``
    column), plus the new key column(s), e.g. a site joined from a static table. Each upstream
    window is one input row whose event time is its window's start (column ``window_start``);
    its upstream key (``source``, e.g. ``"device"``) is the source of min of inputs, so the new
    key's watermark is the minimum over its upstream keys of their latest window start: a site
    window ``[s, e)`` is emitted once every device of the site seen so far has emitted a
    window starting at ``e`` or later. Aggregate the upstream columns with
    ``.window(size).agg(...)`` (a size that is a multiple of the upstream window's, so each
    upstream window falls in one rollup window), e.g. ``F.sum("n")``; see
    `Semantics, "Keyed stages in a pipeline" <../semantics.html#keyed-stages-in-a-pipeline>`__.

    >>> sites = spark.createDataFrame([("d1", "north"), ("d2", "north")], "device STRING, site STRING")
    >>> per_device = (kw.keyed_watermark(events, key="device", event_time="ts", lateness="30 seconds")
    ...               .window("1 minute").agg(F.count("*").alias("n"), F.max("temp").alias("max_temp")))
    >>> per_site = (kw.rollup(per_device.join(sites, "device"), key="site", source="device")
    ...             .window("1 minute").agg(F.sum("n").alias("n"), F.max("max_temp").alias("max_temp")))
    >>> per_site.columns
    ['site', 'window', 'n', 'max_temp']

    ``lateness`` (default 0: a keyed stage emits each key's windows in the order of their
    start) and the other keyword options are those of :func:`keyed_watermark`; ``name`` names
    the stage's metrics (default: the key columns joined with ``_``).
    """
    if not isinstance(windows, DataFrame):
        raise PySparkTypeError(message=f"windows: expected a DataFrame, got {type(windows).__name__}")
    columns = windows.columns
    if "window" not in columns:
        raise PySparkTypeError(
            message="windows: expected the windows of a keyed stage (a 'window' column), "
            f"got columns {columns}; roll up the output of keyed_watermark(...).window(...).agg(...)"
        )
    if "revision" in columns:
        raise PySparkTypeError(
            message="windows: a stage with allowed_lateness emits revisions of a window; rolling them "
            "up would count a window once per revision: roll up a stage without allowed_lateness"
        )
    if "kw_pane" in columns:
        raise PySparkTypeError(
            message="windows: a stage with emit='every_batch' emits several panes of a window; rolling them "
            "up would count a window once per pane: roll up a stage with emit='final'"
        )
    if ROLLUP_TIME in columns:
        raise PySparkTypeError(message=f"windows: the rollup adds the column '{ROLLUP_TIME}', which it already has")
    for option in ("event_time", "source"):
        if option in options:
            raise PySparkTypeError(message=f"{option}: set by rollup (the upstream window's start and key)")
    rows = windows.withColumn(ROLLUP_TIME, F.col("window.start"))
    return keyed_watermark(
        rows, key=key, event_time=ROLLUP_TIME, lateness=lateness, source=_source(rows, source), name=name, **options
    )


__all__ = ["rollup", "ROLLUP_TIME"]
