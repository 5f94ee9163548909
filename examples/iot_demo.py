#!/usr/bin/env python
"""IoT demo: Spark's global watermark vs keyed (per-device) watermarks, on the same stream.

The stream (seeded, deterministic) has uneven devices:

- a few **fast** devices report about every second over a quick link;
- many **slow** devices report every 10-30 s;
- about 20% **batch uploaders** buffer several minutes of readings and upload them at once:
  their rows arrive minutes late, but in order.

Every event has an event time and an arrival time. The arrival timeline is cut into
micro-batches (one parquet file per slice of arrival time, modification times increasing) and
replayed through Spark's file source with ``maxFilesPerTrigger=1`` and ``Trigger.AvailableNow``,
so each file is one micro-batch. Two queries read the same files with the same lateness:

1. ``withWatermark("ts", L).groupBy("device", F.window("ts", W)).agg(...)`` (Spark's global
   watermark: the max event time over *all* devices minus L);
2. ``kw.keyed_watermark(events, key="device", event_time="ts", lateness=L).window(W).agg(...)``
   (one watermark per device).

Both write through a ``foreachBatch`` sink that stamps each emitted row with its micro-batch
id and the arrival time at which that micro-batch's data was complete, so the demo can tell
when each window was emitted. The emit delay of a window is that arrival time minus the
window's end (event-time seconds on the same simulated clock).

The plot's bottom panel follows three devices (one fast, one slow, one uploader): their
watermarks in the keyed run, read back from its checkpoint with Spark's state data source,
against the global watermark in the native run's progress reports.

Run ``dev/demo`` (or ``.venv/bin/python examples/iot_demo.py``); ``--quick`` is a smaller run.
``main()`` returns the metrics as a dict (``tests/test_demo.py`` uses it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, asdict
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import keyed_watermarks as kw

REPO_ROOT = Path(__file__).resolve().parents[1]
EVENT_SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE"
CLASSES = ("fast", "slow", "uploader")
METHODS = ("global", "keyed")
METHOD_LABELS = {
    "global": "Spark global watermark",
    "keyed": "keyed_watermark (per device)",
}
# Event time 0 of the simulation (aligned to a minute, so windows align with the clock).
T0 = dt.datetime(2026, 3, 2, 8, 0, tzinfo=dt.timezone.utc)
T0_EPOCH_S = int(T0.timestamp())
INPUT_FILE = re.compile(r"batch-(\d+)-arrival-(\d+)s\.parquet$")


@dataclass(frozen=True)
class Config:
    devices: int = 100
    fast: int = 10
    uploaders: int = 20
    duration_s: int = 30 * 60  # event time span
    batch_s: int = 15  # arrival time covered by one micro-batch
    upload_every_min: Tuple[float, float] = (3.0, 8.0)  # uploaders' buffer length
    retry_rate: float = 0.002  # fast/slow events retransmitted 45-180 s late
    lateness: str = "30 seconds"
    window: str = "1 minute"
    seed: int = 7

    @staticmethod
    def quick(**overrides) -> "Config":
        base = dict(
            devices=24, fast=3, uploaders=5, duration_s=6 * 60, batch_s=20,
            upload_every_min=(2.5, 4.5),
        )
        base.update(overrides)
        return Config(**base)


@dataclass(frozen=True)
class Event:
    device: str
    ts_ms: int  # event time, ms since T0
    temp: float
    arrival_ms: int  # when the row reaches the pipeline, ms since T0


# ---------------------------------------------------------------------------------------------
# The stream
# ---------------------------------------------------------------------------------------------


def generate(cfg: Config) -> Tuple[List[Event], Dict[str, str]]:
    """Seeded events and each device's class (``fast`` / ``slow`` / ``uploader``)."""
    rng = random.Random(cfg.seed)
    n_slow = cfg.devices - cfg.fast - cfg.uploaders
    if n_slow < 0:
        raise ValueError("devices must be >= fast + uploaders")
    classes = ["fast"] * cfg.fast + ["slow"] * n_slow + ["uploader"] * cfg.uploaders
    rng.shuffle(classes)
    device_class = {f"sensor-{i:03d}": c for i, c in enumerate(classes)}
    events: List[Event] = []
    for device, cls in device_class.items():
        base_temp = rng.uniform(18.0, 30.0)
        phase = rng.uniform(0.0, 2 * math.pi)
        if cls == "fast":
            interval = rng.uniform(0.8, 1.2)
        elif cls == "slow":
            interval = rng.uniform(10.0, 30.0)
        else:
            interval = rng.uniform(5.0, 20.0)
            upload_every = rng.uniform(*cfg.upload_every_min) * 60.0
            first_upload = rng.uniform(0.0, upload_every)
            upload_delay: Dict[int, float] = {}
            in_buffer: Dict[int, int] = {}
        t = rng.uniform(0.0, interval)
        while t < cfg.duration_s:
            temp = round(base_temp + 2.0 * math.sin(2 * math.pi * t / 900.0 + phase)
                         + rng.gauss(0.0, 0.3), 2)
            if cls == "uploader":
                # Buffered until the next upload, then sent in order with the whole buffer.
                k = max(0, math.ceil((t - first_upload) / upload_every))
                if k not in upload_delay:
                    upload_delay[k] = rng.uniform(1.0, 8.0)
                j = in_buffer.get(k, 0)
                in_buffer[k] = j + 1
                arrival = first_upload + k * upload_every + upload_delay[k] + 0.001 * j
            else:
                mean_delay = 0.3 if cls == "fast" else 1.5
                arrival = t + 0.05 + rng.expovariate(1.0 / mean_delay)
                if rng.random() < cfg.retry_rate:
                    arrival += rng.uniform(45.0, 180.0)  # lost packet, retransmitted late
            events.append(Event(device, int(round(t * 1000)), temp, int(round(arrival * 1000))))
            t += interval * rng.uniform(0.9, 1.1)
    events.sort(key=lambda e: (e.arrival_ms, e.device, e.ts_ms))
    return events, device_class


def write_batches(events: Sequence[Event], input_dir: Path, cfg: Config) -> Dict[str, int]:
    """One parquet file per non-empty slice of ``batch_s`` seconds of arrival time.

    Files are named after the arrival time at which their slice ends (``...-arrival-<s>s``) and
    get increasing modification times (the file source's order). Returns name -> cutoff (s).
    """
    input_dir.mkdir(parents=True)
    slices: Dict[int, List[Event]] = {}
    for e in events:
        slices.setdefault(e.arrival_ms // (cfg.batch_s * 1000), []).append(e)
    files: Dict[str, int] = {}
    for i, s in enumerate(sorted(slices)):
        rows = slices[s]
        cutoff_s = (s + 1) * cfg.batch_s
        table = pa.table({
            "device": pa.array([e.device for e in rows], pa.string()),
            "ts": pa.array([(T0_EPOCH_S * 1000 + e.ts_ms) * 1000 for e in rows],
                           pa.timestamp("us", tz="UTC")),
            "temp": pa.array([e.temp for e in rows], pa.float64()),
        })
        path = input_dir / f"batch-{i:05d}-arrival-{cutoff_s:06d}s.parquet"
        pq.write_table(table, path)
        mtime = 1_000_000 + i  # the file source orders files by modification time
        os.utime(path, (mtime, mtime))
        files[path.name] = cutoff_s
    return files


# ---------------------------------------------------------------------------------------------
# The two streaming queries
# ---------------------------------------------------------------------------------------------


def _arrival_of_batch(checkpoint: Path, batch_id: int) -> int:
    """Arrival cutoff (s) of the input file that micro-batch ``batch_id`` read.

    The offset log (written before the batch runs) gives the file source's log offset; the
    file source's log lists the file(s) of that offset. A no-data batch repeats the previous
    offset, i.e. it runs at the same arrival position as the data batch before it.
    """
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    log_offset = json.loads(lines[-1])["logOffset"]  # the file source is the only source
    source_log = checkpoint / "sources" / "0"  # "<n>", or "<n>.compact" every 10th entry
    for name in (str(log_offset), f"{log_offset}.compact"):
        if not (source_log / name).exists():
            continue
        entries = [json.loads(line)
                   for line in (source_log / name).read_text().splitlines()[1:] if line.strip()]
        names = [Path(e["path"]).name for e in entries if e["batchId"] == log_offset]
        cutoffs = [int(m.group(2)) for m in map(INPUT_FILE.search, names) if m]
        if cutoffs:
            return max(cutoffs)
    raise RuntimeError(f"no input file found for batch {batch_id} in {checkpoint}")


def _stamping_sink(out_dir: Path, checkpoint: Path) -> Callable[[DataFrame, int], None]:
    """foreachBatch sink: appends the batch's rows with ``batch_id`` and ``emitted_at_s``."""

    def sink(batch_df: DataFrame, batch_id: int) -> None:
        arrival = _arrival_of_batch(checkpoint, batch_id)
        (batch_df.withColumn("batch_id", F.lit(batch_id))
         .withColumn("emitted_at_s", F.lit(arrival))
         .write.mode("append").parquet(str(out_dir)))

    return sink


def run_side_by_side(spark: SparkSession, input_dir: Path, workdir: Path,
                     cfg: Config) -> Tuple[Dict[str, float], Dict[str, List[dict]]]:
    """Runs both queries over the same files until every file is processed (one after the
    other: on 2 cores, running them concurrently was slower). Returns seconds per query and
    each query's progress reports (as JSON dicts, every micro-batch's)."""
    timings: Dict[str, float] = {}
    progress: Dict[str, List[dict]] = {}
    aggs = lambda: (F.count("*").alias("n"), F.avg("temp").alias("avg_temp"))  # noqa: E731

    def events() -> DataFrame:
        return (spark.readStream.schema(EVENT_SCHEMA)
                .option("maxFilesPerTrigger", 1).parquet(str(input_dir)))

    global_wm = (events().withWatermark("ts", cfg.lateness)
                 .groupBy("device", F.window("ts", cfg.window)).agg(*aggs()))
    keyed = (kw.keyed_watermark(events(), key="device", event_time="ts", lateness=cfg.lateness)
             .window(cfg.window).agg_with_report(*aggs()))
    # The watermark panel reads every micro-batch afterwards: the keyed query's state changes
    # (state data source, change feed) and the global query's progress. Spark keeps 100 of
    # each by default; the full demo runs more batches. A query reads these settings when it
    # starts, so they are set for the two runs only.
    keep = str(max(100, 3 * sum(1 for _ in input_dir.iterdir()) + 10))
    with _session_conf(spark, {"spark.sql.streaming.minBatchesToRetain": keep,
                               "spark.sql.streaming.numRecentProgressUpdates": keep}):
        for name, df in (("global", global_wm), ("keyed", keyed)):
            checkpoint = workdir / "checkpoints" / name
            t = time.monotonic()
            query = (df.writeStream.queryName(f"iot_demo_{name}")
                     .foreachBatch(_stamping_sink(workdir / "output" / name, checkpoint))
                     .outputMode("append")
                     .option("checkpointLocation", str(checkpoint))
                     .trigger(availableNow=True)
                     .start())
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(f"query {name} failed: {query.exception()}")
            timings[name] = time.monotonic() - t
            progress[name] = [json.loads(p.json) for p in query.recentProgress]
            print(f"  {METHOD_LABELS[name]}: {timings[name]:.0f} s", flush=True)
    return timings, progress


@contextlib.contextmanager
def _session_conf(spark: SparkSession, settings: Dict[str, str]):
    """Sets session configurations for the block, then restores the previous values."""
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


# ---------------------------------------------------------------------------------------------
# The rollup: device -> site -> fleet, beside Spark's global watermark
# ---------------------------------------------------------------------------------------------

SITES = 4


def site_of(device_class: Dict[str, str]) -> Dict[str, str]:
    """Each device's site: devices are dealt to SITES sites in name order."""
    return {d: f"site-{i % SITES}" for i, d in enumerate(sorted(device_class))}


def run_rollup(spark: SparkSession, input_dir: Path, workdir: Path, cfg: Config,
               device_class: Dict[str, str]) -> dict:
    """The fleet's events per minute, two ways, each in one query:

    - ``rollup``: keyed per device, then ``kw.rollup`` per site (its devices joined from a static
      table; a site's watermark is the minimum of its devices'), then per fleet (the minimum of
      its sites'): three keyed stages;
    - ``global``: Spark's ``withWatermark("ts", L).groupBy(F.window("ts", W))`` over the fleet.

    Returns, per method, the % of events counted in the fleet windows both emitted, and the
    emit delay of those windows (as in the per-device comparison)."""
    sites = spark.createDataFrame(sorted(site_of(device_class).items()), "device STRING, site STRING")

    def events() -> DataFrame:
        return (spark.readStream.schema(EVENT_SCHEMA)
                .option("maxFilesPerTrigger", 1).parquet(str(input_dir)))

    per_device = (kw.keyed_watermark(events(), key="device", event_time="ts", lateness=cfg.lateness)
                  .window(cfg.window).agg(F.count("*").alias("n")))
    per_site = (kw.rollup(per_device.join(sites, "device"), key="site", source="device")
                .window(cfg.window).agg(F.sum("n").alias("n")))
    per_fleet = (kw.rollup(per_site.withColumn("fleet", F.lit("fleet")), key="fleet", source="site")
                 .window(cfg.window).agg(F.sum("n").alias("n")))
    global_fleet = (events().withWatermark("ts", cfg.lateness).groupBy(F.window("ts", cfg.window))
                    .agg(F.count("*").alias("n")))
    emitted: Dict[str, Dict[int, Tuple[int, int]]] = {}
    for name, df in (("rollup", per_fleet), ("global", global_fleet)):
        checkpoint = workdir / "checkpoints" / f"fleet-{name}"
        out = workdir / "output" / f"fleet-{name}"
        query = (df.writeStream.foreachBatch(_stamping_sink(out, checkpoint))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination()
        if query.exception() is not None:
            raise RuntimeError(f"fleet query {name} failed: {query.exception()}")
        rows = [] if not out.exists() else spark.read.parquet(str(out)).select(
            (F.col("window.start").cast("long") - T0_EPOCH_S).alias("start_s"),
            (F.col("window.end").cast("long") - T0_EPOCH_S).alias("end_s"), "n", "emitted_at_s").collect()
        emitted[name] = {r.start_s: (r.n, r.emitted_at_s - r.end_s) for r in rows}
    truth = {r.start_s: r.n for r in spark.read.schema(EVENT_SCHEMA).parquet(str(input_dir))
             .groupBy(F.window("ts", cfg.window)).agg(F.count("*").alias("n"))
             .select((F.col("window.start").cast("long") - T0_EPOCH_S).alias("start_s"), "n").collect()}
    both = sorted(set(emitted["rollup"]) & set(emitted["global"]))
    result = {"sites": SITES, "fleet_windows_compared": len(both), "truth_events_in_them": sum(truth[w] for w in both)}
    for name in ("rollup", "global"):
        counted = sum(emitted[name][w][0] for w in both)
        delays = [emitted[name][w][1] for w in both]
        result[name] = {
            "fleet_windows_emitted": len(emitted[name]),
            "events_counted": counted,
            "pct_events_counted": 100.0 * counted / max(1, result["truth_events_in_them"]),
            "emit_delay_median_s": _quantile(delays, 0.5),
            "emit_delay_p95_s": _quantile(delays, 0.95),
        }
    return result


def print_rollup(rollup: dict, file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)  # noqa: E731
    p()
    p(f"Fleet events per minute, over the {rollup['fleet_windows_compared']} fleet windows both emitted "
      f"({rollup['truth_events_in_them']} events):")
    for name, label in (("rollup", "keyed rollup device -> site -> fleet"), ("global", "Spark global watermark")):
        m = rollup[name]
        p(f"  {label:<38}{m['pct_events_counted']:>6.1f}% of events counted, "
          f"emit delay p50/p95 {_fmt(m['emit_delay_median_s'])}/{_fmt(m['emit_delay_p95_s'])} s")


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def _windows(df: DataFrame, *extra: str) -> DataFrame:
    return df.select(
        "device",
        (F.col("window.start").cast("long") - T0_EPOCH_S).alias("start_s"),
        (F.col("window.end").cast("long") - T0_EPOCH_S).alias("end_s"),
        "n",
        *extra,
    )


def _quantile(values: Sequence[float], q: float) -> Optional[float]:
    """Linear-interpolated quantile (numpy's default), None for no values."""
    if not values:
        return None
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def compute_metrics(spark: SparkSession, input_dir: Path, workdir: Path, cfg: Config,
                    device_class: Dict[str, str], n_events: int) -> dict:
    truth_rows = _windows(
        spark.read.schema(EVENT_SCHEMA).parquet(str(input_dir))
        .groupBy("device", F.window("ts", cfg.window)).agg(F.count("*").alias("n"))
    ).collect()
    truth = {(r.device, r.start_s): r.n for r in truth_rows}

    emitted: Dict[str, Dict[Tuple[str, int], Tuple[int, int]]] = {}
    late_rows = {}
    for method in METHODS:
        out = spark.read.parquet(str(workdir / "output" / method))
        if method == "keyed":
            late_rows[method] = int(
                out.where("kw_kind = 'late'").agg(F.sum("kw_late_rows")).first()[0] or 0)
            out = out.where("kw_kind = 'window'")
        rows = _windows(out, "emitted_at_s").collect()
        per_window: Dict[Tuple[str, int], Tuple[int, int]] = {}
        for r in rows:
            if (r.device, r.start_s) in per_window:
                raise RuntimeError(f"{method}: window {(r.device, r.start_s)} emitted twice")
            per_window[(r.device, r.start_s)] = (r.n, r.emitted_at_s - r.end_s)
        emitted[method] = per_window

    window_s = _duration_s(cfg.window)
    # Fair basis: the windows that the keyed query closed (a window still open at the end of
    # the stream is emitted by neither query). The global watermark is ahead of every
    # device's own watermark, so it had the chance to close all of these too.
    closed = set(emitted["keyed"])
    events_by_class = {c: 0 for c in CLASSES}
    closed_by_class = {c: 0 for c in CLASSES}
    for (device, start), n in truth.items():
        events_by_class[device_class[device]] += n
        if (device, start) in closed:
            closed_by_class[device_class[device]] += n
    assert sum(events_by_class.values()) == n_events, "ground truth does not match the input"

    metrics: dict = {
        "events": n_events,
        "devices": {c: sum(1 for v in device_class.values() if v == c) for c in CLASSES},
        "truth_windows": len(truth),
        "events_by_class": events_by_class,
        "methods": {},
    }
    for method in METHODS:
        counted = {c: 0 for c in CLASSES}
        counted_closed = {c: 0 for c in CLASSES}
        windows_by_class = {c: 0 for c in CLASSES}
        delays = {c: [] for c in CLASSES}
        wrong = 0
        for (device, start), (n, delay) in emitted[method].items():
            c = device_class[device]
            counted[c] += n
            windows_by_class[c] += 1
            delays[c].append(delay)
            if (device, start) in closed:
                counted_closed[c] += n
            if n != truth.get((device, start)):
                wrong += 1
        all_delays = [d for c in CLASSES for d in delays[c]]
        m = {
            "windows_emitted": len(emitted[method]),
            "windows_emitted_by_class": windows_by_class,
            "windows_with_missing_rows": wrong,
            "events_counted": sum(counted.values()),
            "pct_events_counted": 100.0 * sum(counted.values()) / n_events,
            "pct_events_counted_closed": 100.0 * sum(counted_closed.values())
            / max(1, sum(closed_by_class.values())),
            "pct_by_class": {c: 100.0 * counted[c] / max(1, events_by_class[c]) for c in CLASSES},
            "pct_closed_by_class": {
                c: 100.0 * counted_closed[c] / max(1, closed_by_class[c]) for c in CLASSES},
            "emit_delay_median_s": _quantile(all_delays, 0.5),
            "emit_delay_p95_s": _quantile(all_delays, 0.95),
            "emit_delay_by_class": {
                c: {"median_s": _quantile(delays[c], 0.5), "p95_s": _quantile(delays[c], 0.95)}
                for c in CLASSES},
            "emit_delays_s": {c: delays[c] for c in CLASSES},
        }
        if method in late_rows:
            m["late_rows_reported"] = late_rows[method]
        metrics["methods"][method] = m
    metrics["window_s"] = window_s
    return metrics


# ---------------------------------------------------------------------------------------------
# Per-key watermarks over arrival time (the bottom panel)
# ---------------------------------------------------------------------------------------------

# Long.MinValue: an undefined watermark in the state record (docs/semantics.md, "Per-key state").
_UNDEFINED = -(2**63)


def representative_devices(device_class: Dict[str, str]) -> Dict[str, str]:
    """One device of each class (the first by name): class -> device."""
    return {c: min(d for d, k in device_class.items() if k == c) for c in CLASSES}


def _key_state_changes(spark: SparkSession, checkpoint: Path,
                       devices: Sequence[str]) -> Dict[int, Dict[str, Optional[int]]]:
    """batch id -> {device: watermark (us since the epoch, None: not in state)} for the batches
    that wrote the device's state, from Spark's state data source in change-feed mode (one
    read for the whole run, instead of one ``kw.read_key_state(batch_id=...)`` per batch)."""
    changes = (spark.read.format("statestore")
               .option("readChangeFeed", True).option("changeStartBatchId", 0)
               .option("stateVarName", "key_state").load(str(checkpoint)))
    key = F.col("key").getField(changes.schema["key"].dataType.fieldNames()[0])
    rows = (changes.where(key.isin(list(devices)))
            .select("batch_id", "change_type", key.alias("device"),
                    F.col("value.watermark_us").alias("watermark_us")).collect())
    out: Dict[int, Dict[str, Optional[int]]] = {}
    for r in rows:
        wm = r.watermark_us if r.change_type == "update" and r.watermark_us != _UNDEFINED else None
        out.setdefault(r.batch_id, {})[r.device] = wm
    return out


def _batch_ids(progress: Sequence[dict]) -> List[int]:
    return sorted({p["batchId"] for p in progress})


def watermark_timeline(spark: SparkSession, workdir: Path, devices: Dict[str, str],
                       progress: Dict[str, List[dict]]) -> dict:
    """Per micro-batch, at its arrival time: the representative devices' watermarks after the
    batch (keyed run, from its state) and Spark's global watermark of the batch (native run,
    ``eventTime.watermark`` of its progress). Each is the watermark that closed windows in
    that micro-batch. Times are seconds since T0 (event time) or of arrival."""
    keyed_chk, global_chk = workdir / "checkpoints" / "keyed", workdir / "checkpoints" / "global"
    changes = _key_state_changes(spark, keyed_chk, list(devices.values()))
    current: Dict[str, Optional[int]] = {d: None for d in devices.values()}
    keyed = []
    for b in _batch_ids(progress["keyed"]):
        current.update(changes.get(b, {}))  # a batch that did not touch a key keeps its value
        keyed.append({"batch_id": b, "arrival_s": _arrival_of_batch(keyed_chk, b),
                      "watermark_us": dict(current)})
    native = {}
    for p in progress["global"]:  # an idle report repeats its batch: keep one per batch
        wm = dt.datetime.fromisoformat(p["eventTime"]["watermark"].replace("Z", "+00:00"))
        native[p["batchId"]] = int(wm.timestamp() * 1000)
    glob = [{"batch_id": b, "arrival_s": _arrival_of_batch(global_chk, b), "watermark_ms": wm}
            for b, wm in sorted(native.items())]
    # The documented reader, for the final values (and as a check of the change feed's).
    final_rows = (kw.read_key_state(spark, str(keyed_chk), key="device")
                  .where(F.col("device").isin(list(devices.values())))
                  .select("device", (F.unix_micros("watermark")).alias("wm")).collect())
    final_us = {r.device: r.wm for r in final_rows}
    final_global_ms = glob[-1]["watermark_ms"]
    return {
        "devices": devices,
        "keyed": keyed,
        "global": glob,
        "final_keyed_us": final_us,
        "final_global_ms": final_global_ms,
        "final_lag_s": {d: None if final_us.get(d) is None
                        else (final_global_ms * 1000 - final_us[d]) / 1e6
                        for d in devices.values()},
        "max_lag_s": _max_lag_s(keyed, glob, devices.values()),
    }


def _max_lag_s(keyed: List[dict], glob: List[dict],
               devices: Sequence[str]) -> Dict[str, Optional[float]]:
    """Per device, the most its watermark trailed Spark's global watermark over the run: at
    each keyed micro-batch, Spark's watermark in the native batch at the same arrival time
    (the last one at or before it) minus the device's."""
    out: Dict[str, Optional[float]] = {}
    for d in devices:
        lags = []
        for p in keyed:
            native = [g["watermark_ms"] for g in glob if g["arrival_s"] <= p["arrival_s"]]
            if p["watermark_us"][d] is not None and native and native[-1] > 0:
                lags.append((native[-1] * 1000 - p["watermark_us"][d]) / 1e6)
        out[d] = max(lags) if lags else None
    return out


def watermark_summary(timeline: dict) -> str:
    """One line: how far each representative device's watermark trails Spark's global one, at
    the end of the stream and at most during the run."""
    def lag(x: Optional[float]) -> str:
        return "-" if x is None else (f"{x:.0f} s behind" if x >= 0 else f"{-x:.0f} s ahead")

    parts = [f"{cls} {d}: {lag(timeline['final_lag_s'][d])} at the end "
             f"(at most {lag(timeline['max_lag_s'][d])})"
             for cls, d in timeline["devices"].items()]
    return "Per-key watermarks vs Spark's global watermark: " + "; ".join(parts) + "."


def _duration_s(text: str) -> int:
    number, unit = text.split()
    return int(number) * {"second": 1, "minute": 60, "hour": 3600}[unit.rstrip("s")]


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _fmt(x: Optional[float], spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def print_report(metrics: dict, cfg: Config, n_batches: int, file=sys.stdout) -> None:
    p = lambda *a: print(*a, file=file)  # noqa: E731
    d = metrics["devices"]
    p()
    p(f"{metrics['events']} events from {sum(d.values())} devices "
      f"({d['fast']} fast, {d['slow']} slow, {d['uploader']} batch uploaders), "
      f"{cfg.duration_s // 60} min of event time, {n_batches} micro-batches "
      f"of {cfg.batch_s} s of arrival time; window {cfg.window}, lateness {cfg.lateness}.")
    p(f"Ground truth (batch groupBy over all events): {metrics['truth_windows']} windows.")
    p()
    header = (f"{'method':<30}{'events counted':>15}{'in closed wins':>15}"
              f"{'windows':>14}{'wrong':>7}{'delay p50':>11}{'delay p95':>11}")
    p(header)
    p("-" * len(header))
    for method in METHODS:
        m = metrics["methods"][method]
        p(f"{METHOD_LABELS[method]:<30}"
          f"{m['pct_events_counted']:>14.1f}%"
          f"{m['pct_events_counted_closed']:>14.1f}%"
          f"{m['windows_emitted']:>7}/{metrics['truth_windows']:<6}"
          f"{m['windows_with_missing_rows']:>7}"
          f"{_fmt(m['emit_delay_median_s']):>10}s"
          f"{_fmt(m['emit_delay_p95_s']):>10}s")
    p()
    p("By device class: % of events counted, all (in closed windows), and emit delay p50/p95:")
    header = f"{'method':<30}" + "".join(f"{c:>26}" for c in CLASSES)
    p(header)
    p("-" * len(header))
    for method in METHODS:
        m = metrics["methods"][method]
        cells = []
        for c in CLASSES:
            dl = m["emit_delay_by_class"][c]
            cells.append(f"{m['pct_by_class'][c]:5.1f}% ({m['pct_closed_by_class'][c]:5.1f}%) "
                         f"{_fmt(dl['median_s']):>4}/{_fmt(dl['p95_s']):>4}s")
        p(f"{METHOD_LABELS[method]:<30}" + "".join(f"{x:>26}" for x in cells))
    p()
    p("events counted: sum of the emitted windows' counts / all events. in closed wins: the "
      "same over the\nwindows the keyed query closed (windows still open at the end of the "
      "stream are emitted by\nneither; percentages in parentheses above). wrong: emitted windows "
      "whose count differs from the\nground truth (rows dropped as late). delay: arrival time of "
      "the micro-batch that emitted the\nwindow minus the window's end.")
    late = metrics["methods"]["keyed"].get("late_rows_reported")
    if late is not None:
        p(f"keyed_watermark reported {late} late rows (retransmitted packets behind their "
          f"device's watermark); Spark drops late rows without a per-key report.")


def _plot_watermarks(ax, timeline: dict, global_color: str) -> None:
    """Step lines over arrival time: Spark's global watermark and three devices' own."""
    def minutes_since_t0(epoch_s: float) -> float:
        return (epoch_s - T0_EPOCH_S) / 60.0

    g = [(p["arrival_s"] / 60.0, minutes_since_t0(p["watermark_ms"] / 1000.0))
         for p in timeline["global"] if p["watermark_ms"] > 0]  # Spark's starts at 0
    ax.step([x for x, _ in g], [y for _, y in g], where="post", color=global_color, lw=2.5,
            label="Spark global watermark (native query)")
    colors = {"fast": "#1b9e77", "slow": "#7570b3", "uploader": "#e7298a"}
    for cls, device in timeline["devices"].items():
        pts = [(p["arrival_s"] / 60.0, minutes_since_t0(p["watermark_us"][device] / 1e6))
               for p in timeline["keyed"] if p["watermark_us"][device] is not None]
        ax.step([x for x, _ in pts], [y for _, y in pts], where="post", color=colors[cls],
                lw=1.5, label=f"keyed: {cls} device {device}")
    end = max(p["arrival_s"] for p in timeline["global"]) / 60.0
    ax.plot([0, end], [0, end], color="grey", lw=0.8, ls=":", label="arrival time")
    ax.set_xlabel("arrival time (min): the micro-batch's input complete up to then")
    ax.set_ylabel("watermark (event time, min)")
    ax.set_title("Watermarks as each micro-batch closes windows: Spark's one global watermark "
                 "vs each device's own (read from the keyed query's state)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9)


def plot(metrics: dict, cfg: Config, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.patches  # noqa: F401
    import matplotlib.pyplot as plt

    colors = {"global": "#d95f02", "keyed": "#1b9e77"}
    fig = plt.figure(figsize=(13, 10.4))
    grid = fig.add_gridspec(2, 2)
    ax1, ax2 = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    _plot_watermarks(fig.add_subplot(grid[1, :]), metrics["key_watermarks"], colors["global"])
    groups = list(CLASSES) + ["all"]
    width = 0.38
    for i, method in enumerate(METHODS):
        m = metrics["methods"][method]
        values = [m["pct_closed_by_class"][c] for c in CLASSES] + [m["pct_events_counted_closed"]]
        xs = [g + (i - 0.5) * width for g in range(len(groups))]
        ax1.bar(xs, values, width, label=METHOD_LABELS[method], color=colors[method])
        for x, v in zip(xs, values):
            ax1.text(x, v + 1.5, f"{v:.0f}%", ha="center", va="bottom", fontsize=9)
    d = metrics["devices"]
    ax1.set_xticks(range(len(groups)))
    ax1.set_xticklabels([f"fast\n({d['fast']} devices)", f"slow\n({d['slow']})",
                         f"batch uploaders\n({d['uploader']})", "all"])
    ax1.set_ylim(0, 112)
    ax1.set_ylabel("% of events counted in emitted windows")
    ax1.set_title("Events kept (windows closed by the end of the stream)")
    ax1.legend(loc="lower left", fontsize=9)
    ax1.grid(axis="y", alpha=0.3)

    # Emit delay per class: box = quartiles, whiskers = 5th-95th percentile.
    for i, method in enumerate(METHODS):
        m = metrics["methods"][method]
        data = [m["emit_delays_s"][c] or [float("nan")] for c in CLASSES]
        xs = [g + (i - 0.5) * width for g in range(len(CLASSES))]
        box = ax2.boxplot(data, positions=xs, widths=width * 0.85, whis=(5, 95),
                          showfliers=False, patch_artist=True, manage_ticks=False,
                          medianprops={"color": "black"})
        for patch in box["boxes"]:
            patch.set_facecolor(colors[method])
        for x, c in zip(xs, CLASSES):
            ax2.text(x, 0.02, f"{m['windows_emitted_by_class'][c]}\nwindows", ha="center",
                     va="bottom", fontsize=8, transform=ax2.get_xaxis_transform())
    ax2.set_xticks(range(len(CLASSES)))
    ax2.set_xticklabels(["fast", "slow", "batch uploaders"])
    ax2.set_ylim(bottom=-0.15 * ax2.get_ylim()[1])
    ax2.set_ylabel("emit delay (s): arrival time of the emitting\nmicro-batch - window end")
    ax2.set_title("When windows are emitted (box: quartiles, whiskers: p5-p95)")
    ax2.grid(axis="y", alpha=0.3)
    ax2.legend(handles=[matplotlib.patches.Patch(color=colors[mm], label=METHOD_LABELS[mm])
                        for mm in METHODS], loc="upper left", fontsize=9)
    fig.suptitle(
        f"IoT stream, {metrics['events']} events, window {cfg.window}, lateness {cfg.lateness}: "
        "Spark global watermark vs keyed_watermark", fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------


# The per-key watermark panel reads the state's change feed, which needs RocksDB changelog
# checkpointing: on in the demo's own session, and on for the demo's queries in a given one.
_CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def _session() -> SparkSession:
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("keyed-watermarks-iot-demo")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(_CHANGELOG, "true")
    )
    session = kw.configure(builder).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller run (smoke test)")
    ap.add_argument("--workdir", type=Path,
                    help="where input files, checkpoints and outputs go (kept); "
                         "default: a temporary directory, removed at the end")
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "out" / "iot_demo.png",
                    help="PNG plot (default: out/iot_demo.png in the repository)")
    ap.add_argument("--seed", type=int, default=Config.seed)
    ap.add_argument("--lateness", default=Config.lateness,
                    help="the same lateness for both queries (default: %(default)s)")
    return ap.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None, spark: Optional[SparkSession] = None) -> dict:
    """Runs the demo and returns its metrics. Uses ``spark`` if given (it must have been built
    with ``kw.configure``), else starts a local[2] session and stops it at the end."""
    args = parse_args(argv)
    overrides = dict(seed=args.seed, lateness=args.lateness)
    cfg = Config.quick(**overrides) if args.quick else Config(**overrides)
    started = time.monotonic()
    own_session = spark is None
    changelog_before = None if own_session else spark.conf.get(_CHANGELOG, None)
    tmp = None
    if args.workdir is None:
        tmp = tempfile.mkdtemp(prefix="kw-iot-demo-")
        workdir = Path(tmp)
    else:
        workdir = args.workdir
        workdir.mkdir(parents=True, exist_ok=True)
        for sub in ("input", "checkpoints", "output"):  # only what a previous run wrote
            shutil.rmtree(workdir / sub, ignore_errors=True)
    try:
        events, device_class = generate(cfg)
        files = write_batches(events, workdir / "input", cfg)
        print(f"Generated {len(events)} events in {len(files)} micro-batch files under "
              f"{workdir / 'input'}", flush=True)
        if own_session:
            spark = _session()
        else:
            spark.conf.set(_CHANGELOG, "true")
        print("Running both streaming queries over the same files:", flush=True)
        timings, progress = run_side_by_side(spark, workdir / "input", workdir, cfg)
        streaming_s = sum(timings.values())
        metrics = compute_metrics(spark, workdir / "input", workdir, cfg, device_class, len(events))
        metrics["micro_batch_files"] = len(files)
        metrics["config"] = asdict(cfg)
        metrics["key_watermarks"] = watermark_timeline(
            spark, workdir, representative_devices(device_class), progress)
        print_report(metrics, cfg, len(files))
        print(watermark_summary(metrics["key_watermarks"]))
        print("Running the fleet rollup (device -> site -> fleet) beside Spark's global watermark:", flush=True)
        metrics["rollup"] = run_rollup(spark, workdir / "input", workdir, cfg, device_class)
        print_rollup(metrics["rollup"])
        if args.out is not None:
            plot(metrics, cfg, args.out)
            metrics["plot"] = str(args.out)
            print(f"\nPlot written to {args.out}")
        metrics["streaming_s"] = streaming_s
        metrics["total_s"] = time.monotonic() - started
        print(f"Streaming queries: {streaming_s:.0f} s; total: {metrics['total_s']:.0f} s.")
        return metrics
    finally:
        if own_session and spark is not None:
            spark.stop()
        elif changelog_before is None:
            spark.conf.unset(_CHANGELOG)
        else:
            spark.conf.set(_CHANGELOG, changelog_before)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    main()
