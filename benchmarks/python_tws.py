"""The second competitor: keyed watermarks in pure Python with Spark 4's ``transformWithStateInPandas``.

The newer stateful Python API (state API v2): typed per-key value, list and map state variables
in the RocksDB state store, and timers. This is how a competent user writes the same semantics as
``python_keyed.py`` (docs/semantics.md for ``count(*)`` and ``avg(temp)`` over tumbling windows):

- per key, ``wm(k) = max event time of k - lateness``, undefined until the key's first row,
  never moving backward;
- in a micro-batch, a row is late when its window's end ``<= wm(k)`` as it stood at the start
  of the batch; late rows are counted in the state and never aggregated;
- at the end of the batch, ``wm(k)`` advances with the batch's rows and every open window of
  the key whose end ``<= wm(k)`` is emitted once and removed from the state.

State per key: a ``ValueState`` ``(max_ts, late, min_open)`` and a ``MapState`` window start ->
``(row count, sum of non-null temp, count of non-null temp)``: one map entry per open window, so
a batch touches only the windows its rows fall in, and the map is iterated only when
``min_open`` (the earliest open window's start, kept in the value state) says that some window
can close. Every state call is a round trip from the Python worker to the JVM's state server,
so the batch's rows of a key are first folded per window with numpy (no per-row Python loop).

Timers are not used (``timeMode="None"``): the keyed watermark moves only with the key's own
rows, so windows close exactly in ``handleInputRows``; Spark's event-time timers fire on the
global watermark, which is the semantics this benchmark is not about. ``idle_timeout`` is not
implemented (the benchmark does not use it). ``transformWithStateInPandas`` needs the RocksDB
state store provider (``kw.configure`` sets it) and ``protobuf`` in the Python workers.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

from python_keyed import OUTPUT_SCHEMA, _micros, as_spark_columns

META_SCHEMA = "max_ts LONG, late LONG, min_open LONG"
WINDOW_KEY_SCHEMA = "start LONG"
WINDOW_VALUE_SCHEMA = "n LONG, total DOUBLE, nonnull LONG"
_NONE = np.iinfo(np.int64).max  # min_open when the key has no open window


def _as_ts(us: np.ndarray) -> np.ndarray:
    return us.astype("datetime64[us]").astype("datetime64[ns]")


class KeyedWindowProcessor(StatefulProcessor):
    """Per-key watermark and tumbling windows, ``count(*)`` and ``avg(temp)``."""

    def __init__(self, lateness_us: int, window_us: int) -> None:
        self.lateness_us = lateness_us
        self.window_us = window_us

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.meta = handle.getValueState("meta", META_SCHEMA)
        self.windows = handle.getMapState("windows", WINDOW_KEY_SCHEMA, WINDOW_VALUE_SCHEMA)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
        w = self.window_us
        if self.meta.exists():
            max_ts, late, min_open = self.meta.get()
        else:
            max_ts, late, min_open = None, 0, _NONE
        # Late rows are judged against wm(k) at the start of the batch: read it once.
        wm_start = None if max_ts is None else max_ts - self.lateness_us

        # Fold the whole batch of the key first (pdfs can come in several chunks), then touch
        # each window's map entry once.
        starts, temps = [], []
        for pdf in rows:
            if pdf.empty:
                continue
            t = _micros(pdf["ts"])
            temp = pdf["temp"].to_numpy(dtype=np.float64, na_value=np.nan)
            start = t - np.mod(t, w)  # floor mod: Spark's window() alignment
            batch_max = int(t.max())
            max_ts = batch_max if max_ts is None else max(max_ts, batch_max)
            if wm_start is not None:
                on_time = (start + w) > wm_start
                late += int(len(t) - on_time.sum())
                start, temp = start[on_time], temp[on_time]
            starts.append(start)
            temps.append(temp)
        if max_ts is None:  # no rows at all (cannot happen without timers)
            return
        if starts and sum(len(s) for s in starts):
            start = np.concatenate(starts)
            temp = np.concatenate(temps)
            uniq, inv = np.unique(start, return_inverse=True)
            ok = ~np.isnan(temp)
            cnt = np.bincount(inv, minlength=len(uniq))
            sm = np.bincount(inv, weights=np.where(ok, temp, 0.0), minlength=len(uniq))
            nn = np.bincount(inv, weights=ok, minlength=len(uniq))
            for s, c, x, n in zip(uniq.tolist(), cnt.tolist(), sm.tolist(), nn.tolist()):
                old = self.windows.getValue((s,)) if s >= min_open else None
                if old is None:
                    self.windows.updateValue((s,), (c, x, int(n)))
                else:
                    self.windows.updateValue((s,), (old[0] + c, old[1] + x, old[2] + int(n)))
            min_open = min(min_open, int(uniq[0]))

        wm_now = max_ts - self.lateness_us
        closed = []
        if min_open + w <= wm_now:  # some window can close: one pass over the key's map
            new_min = _NONE
            for (s,), value in self.windows.iterator():
                if s + w <= wm_now:
                    closed.append((s, value))
                else:
                    new_min = min(new_min, s)
            for s, _ in closed:
                self.windows.removeKey((s,))
            min_open = new_min
        self.meta.update((max_ts, late, min_open))
        if closed:
            closed.sort()
            starts_us = np.array([s for s, _ in closed], dtype=np.int64)
            yield pd.DataFrame({
                "device": [key[0]] * len(closed),
                "window_start": _as_ts(starts_us),
                "window_end": _as_ts(starts_us + w),
                "n": np.array([v[0] for _, v in closed], dtype=np.int64),
                "avg_temp": [v[1] / v[2] if v[2] else None for _, v in closed],
            })

    def close(self) -> None:
        pass


def python_tws_windows(
    events: DataFrame, lateness_us: int, window_us: int, key: str = "device"
) -> DataFrame:
    """``count(*) AS n, avg(temp) AS avg_temp`` per key and tumbling window, with per-key
    watermarks, as the same columns as Spark's ``groupBy(key, window(ts)).agg(...)``."""
    if key != "device":
        raise ValueError("the competitor is written for key='device'")
    out = events.select("device", "ts", "temp").groupBy("device").transformWithStateInPandas(
        statefulProcessor=KeyedWindowProcessor(lateness_us, window_us),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode="None",
    )
    return as_spark_columns(out)
