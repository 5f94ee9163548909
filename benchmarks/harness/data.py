"""The generated IoT data: configurations, parquet files, what each semantics leaves open."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List

import argparse
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"
WINDOW, WINDOW_US = "10 seconds", 10_000_000
LATENESS, LATENESS_US = "5 seconds", 5_000_000
# Event time covered by one micro-batch: rows are spread evenly over it (then jittered), so a
# key's watermark advances as long as the key keeps reporting.
BATCH_SPAN_US = 5_000_000
T0_US = 1_735_689_600_000_000  # 2025-01-01T00:00:00Z
DELAYED_FRACTION = 0.2  # rows that arrive out of order ...
MEAN_DELAY_US = 1_000_000  # ... by an exponential delay (mean 1 s) ...
MAX_DELAY_US = 8_000_000  # ... capped at 8 s (a few end up behind their key's watermark)


@dataclass
class Config:
    name: str
    regime: str
    rows_per_batch: int
    batches: int
    keys: int
    seed: int

    @property
    def total_rows(self) -> int:
        return self.rows_per_batch * self.batches


def configurations(args: argparse.Namespace) -> List[Config]:
    if args.quick:
        return [Config("quick", "smoke", 2_000, 5, 100, seed=7)]
    keys = [1_000, 100_000] + ([1_000_000] if args.with_1m_keys else [])
    out = []
    for k in keys:
        out.append(Config(f"small/{_k(k)}", "small batches (latency)", args.small_rows,
                          args.small_batches, k, seed=11 + k))
    for k in keys:
        out.append(Config(f"large/{_k(k)}", "large batches (throughput)", args.large_rows,
                          args.large_batches, k, seed=23 + k))
    if args.configs:
        wanted = set(args.configs.split(","))
        out = [c for c in out if c.name in wanted]
    return out


def _k(n: int) -> str:
    return f"{n // 1_000_000}M keys" if n >= 1_000_000 else f"{n // 1_000}k keys"


def generate(cfg: Config, input_dir: Path, span_us: int = BATCH_SPAN_US,
             set_mtimes: bool = True) -> Dict[str, float]:
    """Writes cfg.batches parquet files (one per micro-batch, mtimes increasing).

    Row i of the stream has event time T0 + i * span_us / rows_per_batch (so every batch
    covers span_us of event time, BATCH_SPAN by default), minus a delay for DELAYED_FRACTION of the rows; its device
    is drawn uniformly from cfg.keys devices. So each device's events are mostly in order, with
    a little out-of-orderness. Returns the open (key, window) counts each semantics leaves in
    state at the end (for state bytes per open window).
    """
    rng = np.random.default_rng(cfg.seed)
    input_dir.mkdir(parents=True, exist_ok=True)
    names = np.array([f"device-{i:07d}" for i in range(cfg.keys)], dtype=object)
    all_dev, all_ts, all_batch = [], [], []
    for b in range(cfg.batches):
        n = cfg.rows_per_batch
        i = np.arange(b * n, (b + 1) * n, dtype=np.int64)
        dev = rng.integers(0, cfg.keys, n)
        ts = T0_US + (i * span_us) // n
        delay = np.minimum(rng.exponential(MEAN_DELAY_US, n), MAX_DELAY_US).astype(np.int64)
        ts = ts - np.where(rng.random(n) < DELAYED_FRACTION, delay, 0)
        temp = 20.0 + 5.0 * np.sin(dev / 7.0) + rng.normal(0.0, 0.5, n)
        table = pa.table({
            "device": pa.array(names[dev], pa.string()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "temp": pa.array(temp, pa.float64()),
        })
        path = input_dir / f"batch-{b:05d}.parquet"
        pq.write_table(table, path)
        if set_mtimes:  # the file source orders by mtime
            os.utime(path, (1_000_000 + b, 1_000_000 + b))
        all_dev.append(dev)
        all_ts.append(ts)
        all_batch.append(np.full(n, b, dtype=np.int32))
    dev = np.concatenate(all_dev)
    ts = np.concatenate(all_ts)
    start = ts - np.mod(ts, WINDOW_US)
    # Keyed: a (key, window) is still open when its end > max event time of the key - L
    # (every row of such a window was on time, since wm(k) only grows).
    key_max = np.full(cfg.keys, np.iinfo(np.int64).min)
    np.maximum.at(key_max, dev, ts)
    open_keyed = _distinct_pairs(dev, start, start + WINDOW_US > key_max[dev] - LATENESS_US)
    # Native: Spark keeps the (key, window) groups whose end > global max - L.
    open_native = _distinct_pairs(dev, start, start + WINDOW_US > ts.max() - LATENESS_US)
    late_keyed = keyed_late_rows(cfg.keys, dev, ts, np.concatenate(all_batch))
    return {"open_keyed": open_keyed, "open_native": open_native,
            "keys_seen": int(len(np.unique(dev))),
            "late_keyed": late_keyed,
            # for closing_file(): device index, event time, file (= data micro-batch) per row
            "rows": (dev, ts, np.concatenate(all_batch))}


def keyed_late_rows(keys: int, dev: np.ndarray, ts: np.ndarray, batch: np.ndarray) -> int:
    """Rows ours drops as late with one file per micro-batch: a row whose window end <= its
    key's watermark at the start of the batch (docs/semantics.md). The harness checks it against
    the query's own `late_rows` metric (main), so Flink's accuracy can be set next to ours."""
    end = ts - np.mod(ts, WINDOW_US) + WINDOW_US
    key_max = np.full(keys, np.iinfo(np.int64).min // 2)
    late = 0
    bounds = np.searchsorted(batch, np.arange(int(batch.max()) + 2))  # rows are in batch order
    for b in range(len(bounds) - 1):
        sl = slice(bounds[b], bounds[b + 1])
        late += int((end[sl] <= key_max[dev[sl]] - LATENESS_US).sum())
        np.maximum.at(key_max, dev[sl], ts[sl])
    return late


def _distinct_pairs(dev: np.ndarray, start: np.ndarray, mask: np.ndarray) -> int:
    if not mask.any():
        return 0
    pairs = dev[mask].astype(np.int64) * (1 << 40) + (start[mask] - T0_US) // WINDOW_US
    return int(len(np.unique(pairs)))
