"""The competitor: keyed watermarks written in pure Python with ``applyInPandasWithState``.

This is what a user writes today without keyed-watermarks. It follows docs/semantics.md for
``count(*)`` and ``avg(temp)`` over tumbling windows:

- per key, ``wm(k) = max event time of k - lateness`` (kept in ``GroupState``), undefined until
  the key's first row, never moving backward;
- in a micro-batch, a row is late when its window's end ``<= wm(k)`` as it stood at the start
  of the batch; late rows are counted in the state and never aggregated;
- at the end of the batch, ``wm(k)`` advances with the batch's rows and every open window of
  the key whose end ``<= wm(k)`` is emitted once and removed from the state.

The per-key state is one row: the max event time, the late-row count and the open windows as a
JSON list of ``[start, row count, sum of non-null temp, count of non-null temp]`` (array
columns in the state schema fail in PySpark 4.3's worker: ``KeyError: 'elementType'`` while
parsing the state schema, so the windows are a JSON string). The batch's
rows of a key are folded with numpy (no per-row Python loop). ``idle_timeout`` is not
implemented (the benchmark does not use it).
"""

from __future__ import annotations

import json
from typing import Iterator, Tuple

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

OUTPUT_SCHEMA = (
    "device STRING, window_start TIMESTAMP, window_end TIMESTAMP, n LONG, avg_temp DOUBLE"
)
STATE_SCHEMA = "max_ts LONG, late LONG, windows STRING"


def _micros(ts: pd.Series) -> np.ndarray:
    """Event times as int64 microseconds (Spark hands TIMESTAMP over as naive datetime64 in the
    session time zone; the benchmark session uses UTC)."""
    return ts.values.astype("datetime64[us]").astype(np.int64)


def make_keyed_window_func(lateness_us: int, window_us: int):
    """The function for ``groupBy(key).applyInPandasWithState``."""

    def func(
        key: Tuple, pdfs: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        if state.exists:
            max_ts, late, stored = state.get
            windows = {w[0]: w[1:] for w in json.loads(stored)}
        else:
            max_ts, late, windows = None, 0, {}
        wm_start = None if max_ts is None else max_ts - lateness_us

        for pdf in pdfs:
            if pdf.empty:
                continue
            t = _micros(pdf["ts"])
            temp = pdf["temp"].to_numpy(dtype=np.float64, na_value=np.nan)
            start = t - np.mod(t, window_us)  # floor mod: Spark's window() alignment
            batch_max = int(t.max())
            if wm_start is not None:
                on_time = (start + window_us) > wm_start
                late += int(len(t) - on_time.sum())
                start, temp = start[on_time], temp[on_time]
            if len(start):
                uniq, inv = np.unique(start, return_inverse=True)
                ok = ~np.isnan(temp)
                cnt = np.bincount(inv, minlength=len(uniq))
                sm = np.bincount(inv, weights=np.where(ok, temp, 0.0), minlength=len(uniq))
                nn = np.bincount(inv, weights=ok, minlength=len(uniq))
                for s, c, x, n in zip(uniq.tolist(), cnt.tolist(), sm.tolist(), nn.tolist()):
                    w = windows.get(s)
                    if w is None:
                        windows[s] = [c, x, int(n)]
                    else:
                        w[0] += c
                        w[1] += x
                        w[2] += int(n)
            max_ts = batch_max if max_ts is None else max(max_ts, batch_max)

        if max_ts is None:  # no rows at all (cannot happen without timeouts)
            return
        wm_now = max_ts - lateness_us
        closed = sorted(s for s in windows if s + window_us <= wm_now)
        keep = sorted(s for s in windows if s + window_us > wm_now)
        state.update((max_ts, late, json.dumps([[s] + windows[s] for s in keep])))
        if closed:
            starts_us = np.array(closed, dtype=np.int64)
            yield pd.DataFrame(
                {
                    "device": [key[0]] * len(closed),
                    "window_start": starts_us.astype("datetime64[us]").astype("datetime64[ns]"),
                    "window_end": (starts_us + window_us)
                    .astype("datetime64[us]")
                    .astype("datetime64[ns]"),
                    "n": np.array([windows[s][0] for s in closed], dtype=np.int64),
                    "avg_temp": [
                        windows[s][1] / windows[s][2] if windows[s][2] else None for s in closed
                    ],
                }
            )

    return func


def python_keyed_windows(
    events: DataFrame, lateness_us: int, window_us: int, key: str = "device"
) -> DataFrame:
    """``count(*) AS n, avg(temp) AS avg_temp`` per key and tumbling window, with per-key
    watermarks, as the same columns as Spark's ``groupBy(key, window(ts)).agg(...)``."""
    if key != "device":
        raise ValueError("the competitor is written for key='device'")
    out = events.select("device", "ts", "temp").groupBy("device").applyInPandasWithState(
        make_keyed_window_func(lateness_us, window_us),
        OUTPUT_SCHEMA,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.NoTimeout,
    )
    return as_spark_columns(out)


def as_spark_columns(out: DataFrame) -> DataFrame:
    """A competitor's OUTPUT_SCHEMA rows as the columns of Spark's ``groupBy(key, window(ts))``."""
    return out.select(
        "device",
        F.struct(F.col("window_start").alias("start"), F.col("window_end").alias("end")).alias(
            "window"
        ),
        "n",
        "avg_temp",
    )
