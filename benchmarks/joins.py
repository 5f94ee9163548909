"""Issue 43: the keyed interval join against Spark's stream-stream join, on the IoT demo's fleet.

Usage: .venv/bin/python benchmarks/joins.py [--devices 60 --minutes 20 --seed 43] [--out benchmarks/results/joins.md]
       .venv/bin/python benchmarks/joins.py --devices 20 --minutes 10 --out /tmp/joins-smoke.md  # smoke
       .venv/bin/python benchmarks/joins.py --throughput [--scale default --runs 3] [--out ...]
       .venv/bin/python benchmarks/joins.py --throughput --scale small --runs 1 --warmups 0 --out /tmp/joins-tp.md  # smoke

Streams (seeded; ``--seed``), two per device, from ``examples/iot_demo.py``'s generator:

- ``readings`` (``reading_id, device, ts, temp``): the demo's events (fast devices about every
  second, slow ones every 10-30 s, batch uploaders that buffer minutes of readings and upload
  them at once, so their rows arrive minutes behind; a few retransmissions 45-180 s late);
- ``alarms`` (``alarm_id, device, raised_at, code``): a seeded share of the readings
  (``--alarm-share``, 10%) each raises an alarm 0-20 s after the reading; an alarm arrives like
  its device's readings: a fast or slow device sends it 0.05 s + an exponential delay (mean
  0.3 s / 1.5 s) after ``raised_at``, an uploader in the upload that carries its next reading
  (the same upload as its readings); and one *boot* alarm per device, raised 1-30 s before its
  first reading (arriving the same way), which no reading matches (the left outer joins'
  unmatched rows).

Both are cut into the same micro-batches by arrival time (``batch_s`` of the demo, 15 s), one
parquet file per side per batch (an empty file when a side has no rows in a batch, so the
batches line up), modification times increasing, read with ``maxFilesPerTrigger=1``; every
query runs with ``Trigger.AvailableNow`` from an empty checkpoint into a ``foreachBatch`` sink
that records each output row's micro-batch id and its pair's ids.

Methods, same bounds: alarms (left) joined to the readings (right) of their device in the
minute before the alarm (``r.ts BETWEEN l.raised_at - 1 minute AND l.raised_at``), lateness
``L`` (``--lateness``, the demo's 30 s):

- **Spark**: ``withWatermark`` on both sides with delay ``L`` and the stream-stream join with
  that condition (inner; left outer), one global watermark (the min of the two sides' max times,
  minus ``L``, over all devices);
- **ours**: ``kw.interval_join(alarms, readings, key="device", left_time="raised_at",
  right_time="ts", before="1 minute", after="0 seconds", lateness=L, how=...)``, each side of
  each device with its own watermark.

Measures per method (the default mode): the **oracle** is Spark's *batch* join of all rows with
the same condition (all matching pairs; checked against a pure-Python count); **pairs joined**
(found by the method); **pairs lost** (oracle minus found), split into the pairs of uploaders
and of the other devices, and into those with a row *late for its own device* (below its
side's max time of its device in earlier micro-batches minus ``L``: a property of the data, which
no per-key join can keep) and the rest; **rows late** (Spark: the progress reports'
``stateOperators[].numRowsDroppedByWatermark`` summed; ours: output rows with
``join_status = "late"``, checked against the rows late for their own device); **emit delay** in
micro-batches, from the batch in which a pair's later row arrived to the batch that emitted it,
p50 / p95 (left outer: also for the unmatched alarms, from their own arrival batch); **state
rows** (``stateOperators[].numRowsTotal`` summed over the operators of a batch's progress: the
most over the batches and at the last batch; Spark's join counts one per held row, ours one per
key and state variable) and **rows held** (input rows in state after a batch: Spark's state rows;
ours from the state horizon of docs/semantics.md applied to the same batches, as its list
states do not count their rows); **wall time** of the query (start to termination).

``--throughput``: every device in step (the generator with all devices fast, no uploaders, no
retransmissions), more volume (``--scale``: small / default / large, about 12k / 300k / 1M
readings, 60-second batches, ``--batch-s``), Spark's inner join and ours alternating (Spark,
ours, Spark, ours, ...): ``--warmups`` untimed warm-up runs per method (default 1), then
``--runs`` timed ones (default 3), each from a fresh checkpoint into a ``foreachBatch`` sink that
only counts the rows per ``join_status``; **rows/s** = input rows (readings + alarms) / wall time
of the query, median per method, and ours / Spark; the pairs of every run must equal the
oracle's count (in step no row is late under either rule): a difference is printed and the
script exits with status 1.

Output: the tables on stdout and a page ``benchmarks/results/joins.md`` (``--throughput``:
``joins-throughput.md``; ``--out`` to choose) with the raw numbers beside it (``.json``),
naming the command, machine, date, commit and Spark version.
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

from harness.session import base_builder, close_session, start_session  # noqa: E402
from iot_demo import T0_EPOCH_S, Config, generate  # noqa: E402

SECOND = 1_000_000  # micros
READING_SCHEMA = "reading_id BIGINT, device STRING, ts TIMESTAMP, temp DOUBLE"
ALARM_SCHEMA = "alarm_id BIGINT, device STRING, raised_at TIMESTAMP, code STRING"
BEFORE_S, AFTER_S = 60, 0
CODES = ("E1", "E2", "E3", "E4")
SCALES = {  # --throughput: (devices, seconds of event time); all devices fast (about 1 reading/s)
    "small": (20, 600),
    "default": (200, 1_500),
    "large": (400, 2_500),
}

# (id, device, time us, value, arrival us)
Row = Tuple[int, str, int, object, int]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Streams
# ------------------------------------------------------------------------------------------------

@dataclass
class Streams:
    readings: List[Row]
    alarms: List[Row]
    classes: Dict[str, str]
    batch_s: int
    description: str

    def batch_of(self, arrival_us: int) -> int:
        return arrival_us // (self.batch_s * SECOND)


def make_streams(cfg: Config, alarm_share: float, seed: int, batch_s: int, description: str,
                 boot_alarms: bool = False) -> Streams:
    events, classes = generate(cfg)
    rng = random.Random(seed * 1_000_003 + 43)
    readings: List[Row] = [(i, e.device, e.ts_ms * 1000, e.temp, e.arrival_ms * 1000) for i, e in enumerate(events)]
    by_device: Dict[str, List[Row]] = {}
    for r in sorted(readings, key=lambda r: (r[1], r[2])):
        by_device.setdefault(r[1], []).append(r)
    times = {d: [r[2] for r in rs] for d, rs in by_device.items()}
    alarms: List[Row] = []
    for r in readings:
        if rng.random() >= alarm_share:
            continue
        device = r[1]
        raised = r[2] + int(rng.uniform(0, 20) * SECOND)
        if classes[device] == "uploader":  # in the upload of the device's next reading
            rs = by_device[device]
            j = bisect.bisect_left(times[device], raised)
            arrival = rs[j][4] + 1000 if j < len(rs) else max(rs[-1][4], raised) + SECOND
        else:
            mean = 0.3 if classes[device] == "fast" else 1.5
            arrival = raised + int((0.05 + rng.expovariate(1.0 / mean)) * SECOND)
        alarms.append((len(alarms), device, raised, rng.choice(CODES), arrival))
    for device, rs in sorted(by_device.items()) if boot_alarms else ():
        # A boot alarm, raised 1-30 s before the device's first reading: nothing can match it.
        raised = rs[0][2] - int(rng.uniform(1, 30) * SECOND)
        if classes[device] == "uploader":  # in the upload of its first reading
            arrival = rs[0][4] + 1000
        else:
            mean = 0.3 if classes[device] == "fast" else 1.5
            arrival = raised + int((0.05 + rng.expovariate(1.0 / mean)) * SECOND)
        alarms.append((len(alarms), device, raised, "BOOT", max(0, arrival)))
    return Streams(readings, alarms, classes, batch_s, description)


def delayed_streams(args) -> Streams:
    uploaders = max(1, round(args.devices * 0.2))
    fast = max(1, round(args.devices * 0.1))
    cfg = Config(devices=args.devices, fast=fast, uploaders=uploaders, duration_s=args.minutes * 60,
                 upload_every_min=(3.0, 5.0), seed=args.seed)
    desc = (f"the IoT demo's generator (seed {args.seed}): {args.devices} devices ({fast} fast, "
            f"{args.devices - fast - uploaders} slow, {uploaders} batch uploaders, uploads every 3-5 min), "
            f"{args.minutes} minutes of event time, {cfg.batch_s} s micro-batches by arrival")
    return make_streams(cfg, args.alarm_share, args.seed, cfg.batch_s, desc, boot_alarms=True)


def in_step_streams(args) -> Streams:
    devices, span = SCALES[args.scale]
    cfg = Config(devices=devices, fast=devices, uploaders=0, duration_s=span, retry_rate=0.0, seed=args.seed)
    desc = (f"the IoT demo's generator in step (seed {args.seed}): {devices} devices, all fast (a reading "
            f"about every second, 0.05 s + exp(0.3 s) network delay), no uploaders, no retransmissions, "
            f"{span} s of event time, {args.batch_s} s micro-batches by arrival")
    return make_streams(cfg, args.alarm_share, args.seed, args.batch_s, desc)


def write_inputs(s: Streams, root: Path) -> int:
    """One parquet file per side per micro-batch (empty files included); returns the batches."""
    n = 1 + max(s.batch_of(r[4]) for r in s.readings + s.alarms)
    sides = [("readings", s.readings, ("reading_id", "device", "ts", "temp"), pa.float64()),
             ("alarms", s.alarms, ("alarm_id", "device", "raised_at", "code"), pa.string())]
    for side, rows, names, value_type in sides:
        d = root / side
        d.mkdir(parents=True)
        per: List[List[Row]] = [[] for _ in range(n)]
        for r in sorted(rows, key=lambda r: (r[4], r[1], r[2])):
            per[s.batch_of(r[4])].append(r)
        for i, b in enumerate(per):
            table = pa.table({
                names[0]: pa.array([r[0] for r in b], pa.int64()),
                names[1]: pa.array([r[1] for r in b], pa.string()),
                names[2]: pa.array([T0_EPOCH_S * SECOND + r[2] for r in b], pa.timestamp("us", tz="UTC")),
                names[3]: pa.array([r[3] for r in b], value_type),
            })
            path = d / f"batch-{i:05d}.parquet"
            pq.write_table(table, path)
            os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the file source orders by mtime
    return n


# ------------------------------------------------------------------------------------------------
# Oracle and the data's own late rows
# ------------------------------------------------------------------------------------------------

def python_pairs(s: Streams, collect: bool = True):
    """All matching (alarm_id, reading_id) pairs (or their count with ``collect=False``)."""
    times: Dict[str, List[int]] = {}
    ids: Dict[str, List[int]] = {}
    for r in sorted(s.readings, key=lambda r: (r[1], r[2])):
        times.setdefault(r[1], []).append(r[2])
        ids.setdefault(r[1], []).append(r[0])
    pairs: Set[Tuple[int, int]] = set()
    count = 0
    for a in s.alarms:
        t = times.get(a[1], [])
        lo = bisect.bisect_left(t, a[2] - BEFORE_S * SECOND)
        hi = bisect.bisect_right(t, a[2] + AFTER_S * SECOND)
        count += hi - lo
        if collect:
            pairs.update((a[0], rid) for rid in ids[a[1]][lo:hi])
    return pairs if collect else count


def own_late(s: Streams, lateness_us: int) -> Tuple[Set[int], Set[int]]:
    """Ids of the alarms and readings late for their own device: below the max time of their
    device's side in earlier micro-batches minus the lateness (docs/semantics.md, "Interval join")."""
    out = []
    for rows in (s.alarms, s.readings):
        late: Set[int] = set()
        max_t: Dict[str, int] = {}
        by_batch: Dict[int, List[Row]] = {}
        for r in rows:
            by_batch.setdefault(s.batch_of(r[4]), []).append(r)
        for b in sorted(by_batch):
            for r in by_batch[b]:
                if r[1] in max_t and r[2] < max_t[r[1]] - lateness_us:
                    late.add(r[0])
            for r in by_batch[b]:
                max_t[r[1]] = max(max_t.get(r[1], r[2]), r[2])
        out.append(late)
    return out[0], out[1]


def held_rows_model(s: Streams, lateness_us: int) -> List[int]:
    """Rows ours holds after each micro-batch, by the state horizon of docs/semantics.md
    ("Interval join"): on-time rows only; at the end of a batch in which a key has rows, a left
    row leaves once ``l + after < wmR(k)`` and a right row once ``r + before < wmL(k)``."""
    nb = 1 + max(s.batch_of(r[4]) for r in s.readings + s.alarms)
    per: List[List[Tuple[int, str, int]]] = [[] for _ in range(nb)]
    for side, rows in ((0, s.alarms), (1, s.readings)):
        for r in rows:
            per[s.batch_of(r[4])].append((side, r[1], r[2]))
    held: Dict[str, List[List[int]]] = {}
    max_t: Dict[Tuple[int, str], int] = {}
    out = []
    for batch in per:
        start = dict(max_t)
        for side, k, t in batch:
            if (side, k) not in start or t >= start[(side, k)] - lateness_us:
                held.setdefault(k, [[], []])[side].append(t)
            max_t[(side, k)] = max(max_t.get((side, k), t), t)
        for k in {k for _, k, _ in batch}:
            lefts, rights = held.setdefault(k, [[], []])
            if (1, k) in max_t:
                wm_r = max_t[(1, k)] - lateness_us
                lefts[:] = [t for t in lefts if t + AFTER_S * SECOND >= wm_r]
            if (0, k) in max_t:
                wm_l = max_t[(0, k)] - lateness_us
                rights[:] = [t for t in rights if t + BEFORE_S * SECOND >= wm_l]
        out.append(sum(len(v[0]) + len(v[1]) for v in held.values()))
    return out


# ------------------------------------------------------------------------------------------------
# Spark
# ------------------------------------------------------------------------------------------------

def build_session(driver_memory: str, jar: Optional[str] = None):
    """The benchmarks' session (harness/session.py), every progress report of a query kept;
    `jar`: another build of the library's jar."""
    return start_session(base_builder(driver_memory, app_name="keyed-watermarks-joins", recent_progress=100_000),
                         jar)


def sides(spark, root: Path):
    alarms = spark.readStream.schema(ALARM_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(root / "alarms"))
    readings = spark.readStream.schema(READING_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(root / "readings"))
    return alarms, readings


def spark_join(spark, root: Path, lateness: str, how: str):
    from pyspark.sql import functions as F

    alarms, readings = sides(spark, root)
    left = alarms.withWatermark("raised_at", lateness)
    right = readings.withColumnRenamed("device", "r_device").withWatermark("ts", lateness)
    cond = F.expr(f"device = r_device AND ts BETWEEN raised_at - INTERVAL {BEFORE_S} SECONDS "
                  f"AND raised_at + INTERVAL {AFTER_S} SECONDS")
    joined = left.join(right, cond, "inner" if how == "inner" else "left_outer")
    status = F.when(F.col("reading_id").isNull(), F.lit("unmatched")).otherwise(F.lit("joined"))
    return joined.select("alarm_id", "reading_id", status.alias("join_status"))


def ours_join(spark, root: Path, lateness: str, how: str):
    import keyed_watermarks as kw

    alarms, readings = sides(spark, root)
    joined = kw.interval_join(alarms, readings, key="device", left_time="raised_at", right_time="ts",
                              before=f"{BEFORE_S} seconds", after=f"{AFTER_S} seconds", lateness=lateness, how=how)
    return joined.select("alarm_id", "reading_id", "join_status")


def file_batches(checkpoint: Path) -> Dict[int, int]:
    """Micro-batch id -> the input file index it read (both sources' file-log offsets, which
    must agree; a no-data batch repeats its predecessor's offset and is left out)."""
    out: Dict[int, int] = {}
    seen: Set[int] = set()
    for p in sorted((checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1):
        if not p.name.isdigit():
            continue
        offsets = [json.loads(x)["logOffset"] for x in p.read_text().splitlines()[2:] if x.strip() not in ("", "-")]
        if len(set(offsets)) != 1:
            raise RuntimeError(f"batch {p.name}: the two sources read different files {offsets}")
        if offsets[0] not in seen:
            seen.add(offsets[0])
            out[int(p.name)] = offsets[0]
    return out


def run_query(df, checkpoint: Path, collect: bool) -> dict:
    """Runs ``df`` to the end of its input; returns the rows (batch id, alarm id, reading id,
    status), or per-status counts with ``collect=False``, the progress reports and the wall time."""
    rows: List[Tuple[int, Optional[int], Optional[int], str]] = []
    counts: Counter = Counter()

    def sink(batch_df, batch_id: int) -> None:
        if collect:
            rows.extend((batch_id, r[0], r[1], r[2]) for r in batch_df.collect())
        else:
            for r in batch_df.groupBy("join_status").count().collect():
                counts[r[0]] += r[1]

    started = time.monotonic()
    query = (df.writeStream.foreachBatch(sink).outputMode("append")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    wall = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    progress = [json.loads(p.json) for p in query.recentProgress]
    return dict(rows=rows, counts=counts, progress=progress, wall=wall, batches=file_batches(checkpoint))


def state_measures(progress: Sequence[dict]) -> dict:
    per_batch = [sum(op.get("numRowsTotal", 0) for op in p.get("stateOperators", [])) for p in progress]
    dropped = sum(op.get("numRowsDroppedByWatermark", 0) for p in progress for op in p.get("stateOperators", []))
    return dict(state_max=max(per_batch, default=0), state_end=per_batch[-1] if per_batch else 0,
                dropped=dropped, micro_batches=len(progress))


# ------------------------------------------------------------------------------------------------
# Measures
# ------------------------------------------------------------------------------------------------

def quantile(values: Sequence[float], q: float) -> Optional[float]:
    if not values:
        return None
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


def measure(s: Streams, method: str, how: str, run: dict, oracle: Set[Tuple[int, int]],
            late_alarms: Set[int], late_readings: Set[int], held_model: Sequence[int]) -> dict:
    alarm = {a[0]: a for a in s.alarms}
    reading = {r[0]: r for r in s.readings}
    batch_id_of_file = {f: b for b, f in run["batches"].items()}

    def arrival_batch(row: Row) -> int:
        return batch_id_of_file[s.batch_of(row[4])]

    found: Counter = Counter()
    delays, unmatched_delays = [], []
    unmatched: Set[int] = set()
    late_out_alarms: Set[int] = set()
    late_out_readings: Set[int] = set()
    statuses: Counter = Counter()
    for b, aid, rid, status in run["rows"]:
        statuses[status] += 1
        if status == "joined":
            found[(aid, rid)] += 1
            later = max(arrival_batch(alarm[aid]), arrival_batch(reading[rid]))
            delays.append(b - later)
        elif status == "unmatched":
            unmatched.add(aid)
            unmatched_delays.append(b - arrival_batch(alarm[aid]))
        elif status == "late":
            (late_out_alarms if aid is not None else late_out_readings).add(aid if aid is not None else rid)
    pairs = set(found)
    lost = oracle - pairs
    with_late = {p for p in lost if p[0] in late_alarms or p[1] in late_readings}
    upl = {p for p in lost if s.classes[alarm[p[0]][1]] == "uploader"}
    st = state_measures(run["progress"])
    out = dict(
        method=method, how=how, oracle=len(oracle), joined=len(pairs), duplicates=sum(n - 1 for n in found.values()),
        extra=len(pairs - oracle), lost=len(lost), lost_uploaders=len(upl), lost_others=len(lost) - len(upl),
        lost_own_late=len(with_late), lost_rest=len(lost) - len(with_late),
        late_rows=st["dropped"] if method == "Spark" else statuses["late"],
        delay_p50=quantile(delays, 0.5), delay_p95=quantile(delays, 0.95),
        unmatched=len(unmatched), unmatched_p50=quantile(unmatched_delays, 0.5),
        unmatched_p95=quantile(unmatched_delays, 0.95),
        state_max=st["state_max"], state_end=st["state_end"], micro_batches=st["micro_batches"],
        held_max=st["state_max"] if method == "Spark" else max(held_model, default=0),
        held_end=st["state_end"] if method == "Spark" else (held_model[-1] if held_model else 0),
        wall_s=run["wall"], statuses=dict(statuses),
    )
    if method == "ours":
        out["late_alarms_match_data"] = late_out_alarms == late_alarms
        out["late_readings_match_data"] = late_out_readings == late_readings
        # Left outer: every on-time alarm without an on-time match, emitted once its device's
        # readings are past it (the rest still wait at the end of the input).
        if how == "left_outer":
            matched_on_time = {a for a, r in oracle if a not in late_alarms and r not in late_readings}
            out["unmatched_wrong"] = len({a for a in unmatched if a in matched_on_time or a in late_alarms})
            out["unmatched_expected"] = len(set(alarm) - matched_on_time - late_alarms)
    return out


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def fmt(x, digits: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def header(title: str, command: str, spark_version: str, java_version: str, elapsed: float) -> List[str]:
    try:  # the commit measured (a result page names its code)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown commit"
    now = datetime.datetime.now(datetime.timezone.utc)
    return [
        f"# {title}: {now:%Y-%m-%d}, `{commit}`", "",
        f"Written by `benchmarks/joins.py`; see benchmarks/README.md. Command: `{command}`", "",
        f"- Date: {now:%Y-%m-%d %H:%M UTC}; total time {elapsed / 60:.1f} min",
        f"- Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}, "
        f"Java {java_version}, Spark {spark_version}, load average at the end "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}",
        "- Spark: local[2], spark.sql.shuffle.partitions=2, AQE off, RocksDB state store (set by kw.configure), "
        "changelog checkpointing off (default), Trigger.AvailableNow, maxFilesPerTrigger=1 per side, "
        "foreachBatch sink, every run from an empty checkpoint",
        f"- Commit: `{commit}`",
        "",
    ]


def delayed_table(results: Sequence[dict]) -> List[str]:
    lines = ["| join | method | pairs joined | of oracle | pairs lost | lost: uploaders / others | "
             "lost: a row late for its device / rest | rows late | emit delay p50 / p95 (batches) | "
             "unmatched emitted | unmatched delay p50 / p95 | rows held max / end | state rows max / end | batches | "
             "wall s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        um = ("–", "–")
        if r["how"] == "left_outer":
            expected = f" of {fmt(r['unmatched_expected'])}" if "unmatched_expected" in r else ""
            um = (fmt(r["unmatched"]) + expected, f"{fmt(r['unmatched_p50'])} / {fmt(r['unmatched_p95'])}")
        lines.append(
            f"| {r['how']} | {r['method']} | {fmt(r['joined'])} | {fmt(r['oracle'])} | {fmt(r['lost'])} | "
            f"{fmt(r['lost_uploaders'])} / {fmt(r['lost_others'])} | {fmt(r['lost_own_late'])} / {fmt(r['lost_rest'])} | "
            f"{fmt(r['late_rows'])} | {fmt(r['delay_p50'])} / {fmt(r['delay_p95'])} | {um[0]} | {um[1]} | "
            f"{fmt(r['held_max'])} / {fmt(r['held_end'])} | "
            f"{fmt(r['state_max'])} / {fmt(r['state_end'])} | {r['micro_batches']} | {r['wall_s']:.1f} |")
    return lines


def delayed_mode(args, command: str) -> Tuple[str, dict, bool]:
    from pyspark.sql import functions as F

    s = delayed_streams(args)
    lateness_us = int(args.lateness.split()[0]) * SECOND
    late_alarms, late_readings = own_late(s, lateness_us)
    oracle = python_pairs(s)
    held = held_rows_model(s, lateness_us)
    uploader_pairs = sum(1 for a, _ in oracle if s.classes[s.alarms[a][1]] == "uploader")
    log(f"{len(s.readings):,} readings, {len(s.alarms):,} alarms, {len(oracle):,} matching pairs "
        f"({uploader_pairs:,} on uploaders); late for their own device: {len(late_alarms)} alarms, "
        f"{len(late_readings)} readings")
    work = Path(tempfile.mkdtemp(prefix="kw-joins-"))
    started = time.time()
    results = []
    ok = True
    spark = build_session(args.driver_memory, args.jar)
    try:
        n = write_inputs(s, work / "input")
        bo = spark.read.schema(ALARM_SCHEMA).parquet(str(work / "input" / "alarms")).alias("l")
        br = spark.read.schema(READING_SCHEMA).parquet(str(work / "input" / "readings")).alias("r")
        batch_oracle = {(r[0], r[1]) for r in bo.join(br, F.expr(
            f"l.device = r.device AND r.ts BETWEEN l.raised_at - INTERVAL {BEFORE_S} SECONDS "
            f"AND l.raised_at + INTERVAL {AFTER_S} SECONDS")).select("l.alarm_id", "r.reading_id").collect()}
        if batch_oracle != oracle:
            ok = False
            log(f"ORACLE MISMATCH: Spark's batch join {len(batch_oracle):,} pairs, Python {len(oracle):,}")
        hows = ["inner", "left_outer"] if not args.inner_only else ["inner"]
        for how in hows:
            for method, make in (("Spark", spark_join), ("ours", ours_join)):
                tag = f"{method}-{how}"
                run = run_query(make(spark, work / "input", args.lateness, how), work / "checkpoints" / tag, True)
                r = measure(s, method, how, run, batch_oracle, late_alarms, late_readings, held)
                results.append(r)
                log(f"{tag}: {r['joined']:,} of {r['oracle']:,} pairs, {r['lost']:,} lost, {r['late_rows']:,} late rows, "
                    f"{r['wall_s']:.1f} s")
    finally:
        java_version, spark_version = close_session(spark, work, keep_work=False)
    problems = []
    for r in results:
        if r["method"] != "ours":
            continue
        if r["lost_rest"] or r["extra"] or r["duplicates"]:
            problems.append(f"ours {r['how']}: {r['lost_rest']} pairs of on-time rows lost, {r['extra']} pairs not in the "
                            f"oracle, {r['duplicates']} emitted twice")
        if not (r["late_alarms_match_data"] and r["late_readings_match_data"]):
            problems.append(f"ours {r['how']}: its late rows differ from the rows late for their own device")
        if r.get("unmatched_wrong"):
            problems.append(f"ours {r['how']}: {r['unmatched_wrong']} alarms emitted unmatched that had an on-time match "
                            "or were late")
    ok = ok and not problems
    lines = [f"Streams: {s.description}; {len(s.readings):,} readings and {len(s.alarms):,} alarms "
             f"({args.alarm_share:.0%} of the readings raise one 0-20 s later; plus one boot alarm per device, "
             f"which nothing matches), {n} micro-batches. Alarms (left) "
             f"joined to the readings (right) of their device with `ts BETWEEN raised_at - {BEFORE_S} s AND "
             f"raised_at`, lateness {args.lateness}. Oracle (Spark's batch join): {len(oracle):,} pairs, "
             f"{uploader_pairs:,} of them on uploaders; rows late for their own device (the data's, "
             f"lateness {args.lateness}): {len(late_alarms)} alarms, {len(late_readings)} readings.", ""]
    lines += delayed_table(results)
    lines += ["", "Definitions: *pairs joined*: distinct (alarm, reading) pairs emitted as joined; *pairs lost*: "
              "oracle pairs not emitted, split by the alarm's device class and by whether the alarm or the "
              "reading is late for its own device (below its side's max time of its device in earlier "
              "micro-batches minus the lateness; no per-key rule keeps those); *rows late*: Spark's "
              "`numRowsDroppedByWatermark` summed over its progress reports, ours' output rows with "
              "`join_status = \"late\"`; *unmatched emitted*: alarms emitted unmatched (ours: of the "
              "on-time alarms without an on-time match; it emits one once its device's readings pass it); "
              "*emit delay*: micro-batch id that emitted a pair minus that of the "
              "batch in which its later row arrived (unmatched: from the alarm's arrival); *state rows*: "
              "`numRowsTotal` summed over a batch's state operators, the most over the batches / at the last "
              "batch (Spark's join: one per held row of either side; ours, a transformWithState operator: one "
              "per key and state variable, a key's held rows of a side being one list); *rows held*: the input "
              "rows in state after a batch, the most / at the last batch (Spark: its state rows; ours: from "
              "the state horizon of docs/semantics.md applied to the same batches); "
              "*batches*: micro-batches run (including no-data batches); *wall s*: query start to end."]
    if problems:
        lines += ["", "**Problems found:**", ""] + [f"- {p}" for p in problems]
    elapsed = time.time() - started
    page = "\n".join(header("Issue 43: interval joins on the IoT demo's fleet, Spark's and ours", command,
                            spark_version, java_version, elapsed) + lines) + "\n"
    raw = dict(mode="delayed", command=command, streams=s.description, readings=len(s.readings),
               alarms=len(s.alarms), oracle=len(oracle), late_alarms=len(late_alarms),
               late_readings=len(late_readings), results=results, problems=problems)
    return page, raw, ok


def throughput_mode(args, command: str) -> Tuple[str, dict, bool]:
    methods = [m for m in ("Spark", "ours") if m in args.methods.split(",")]
    if not methods or set(args.methods.split(",")) - {"Spark", "ours"}:
        raise SystemExit(f"--methods {args.methods!r}: expected Spark, ours or Spark,ours")
    s = in_step_streams(args)
    expected = python_pairs(s, collect=False)
    rows_in = len(s.readings) + len(s.alarms)
    log(f"{len(s.readings):,} readings, {len(s.alarms):,} alarms, {expected:,} matching pairs")
    work = Path(tempfile.mkdtemp(prefix="kw-joins-tp-"))
    started = time.time()
    runs: List[dict] = []
    spark = build_session(args.driver_memory, args.jar)
    try:
        n = write_inputs(s, work / "input")
        for i in range(args.warmups + args.runs):
            warmup = i < args.warmups
            for method, make in [(m, {"Spark": spark_join, "ours": ours_join}[m]) for m in methods]:
                cp = work / "checkpoints" / f"{method}-{i}"
                run = run_query(make(spark, work / "input", args.lateness, "inner"), cp, False)
                shutil.rmtree(cp, ignore_errors=True)
                st = state_measures(run["progress"])
                pairs = run["counts"].get("joined", 0)
                runs.append(dict(method=method, run=i, warmup=warmup, wall_s=run["wall"], rows_per_s=rows_in / run["wall"],
                                 pairs=pairs, late=run["counts"].get("late", 0) + st["dropped"],
                                 state_max=st["state_max"], micro_batches=st["micro_batches"]))
                what = f"warm-up {i + 1}/{args.warmups}" if warmup else f"run {i - args.warmups + 1}/{args.runs}"
                log(f"{what} {method}: {run['wall']:.1f} s, {rows_in / run['wall']:,.0f} rows/s, "
                    f"{pairs:,} pairs")
    finally:
        java_version, spark_version = close_session(spark, work, keep_work=False)
    wrong = [r for r in runs if r["pairs"] != expected]
    for r in wrong:
        print(f"PAIRS DIFFER: {r['method']} run {r['run']}: {r['pairs']:,} pairs, oracle {expected:,}", file=sys.stderr)
    timed = [r for r in runs if not r["warmup"]]
    med = {m: statistics.median(r["wall_s"] for r in timed if r["method"] == m) for m in methods}
    lines = [f"Streams: {s.description}; {len(s.readings):,} readings and {len(s.alarms):,} alarms "
             f"({rows_in:,} input rows), {n} micro-batches; inner join, `ts BETWEEN raised_at - {BEFORE_S} s AND "
             f"raised_at`, lateness {args.lateness}; oracle {expected:,} pairs. {args.warmups} warm-up run(s) "
             f"per method (in its own column, not in the median), then {args.runs} timed runs per method, "
             "alternating (Spark, ours, ...), each from a fresh checkpoint; the sink counts the rows per "
             "`join_status` in each batch.", "",
             "| method | warm-up s | timed runs | median s | min–max s | rows/s (median) | vs Spark | pairs | "
             "late rows | state rows max | batches |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def vs_spark(m: str) -> str:
        return f"{med['Spark'] / med[m]:.2f}x" if "Spark" in med else "–"

    for m in methods:
        rs = [r for r in runs if r["method"] == m]
        walls = [r["wall_s"] for r in rs if not r["warmup"]]
        warm = ", ".join(f"{r['wall_s']:.1f}" for r in rs if r["warmup"]) or "–"
        lines.append(f"| {m} | {warm} | {len(walls)} | {med[m]:.1f} | {min(walls):.1f}–{max(walls):.1f} | "
                     f"{rows_in / med[m]:,.0f} | {vs_spark(m)} | "
                     f"{'/'.join(sorted({fmt(r['pairs']) for r in rs}))} | {max(r['late'] for r in rs):,} | "
                     f"{max(r['state_max'] for r in rs):,} | {rs[0]['micro_batches']} |")
    lines += ["", "*rows/s* = input rows / median wall time (query start to termination); *vs Spark* = Spark's "
              "median / this median (higher is faster); *pairs*: rows emitted as joined per run, warm-ups "
              "included (all values listed if they differ)."]
    if wrong:
        lines += ["", f"**Pairs differ from the oracle ({expected:,}) in {len(wrong)} run(s).**"]
    elapsed = time.time() - started
    page = "\n".join(header("Issue 43: interval join throughput in step, Spark's and ours", command,
                            spark_version, java_version, elapsed) + lines) + "\n"
    raw = dict(mode="throughput", command=command, streams=s.description, rows_in=rows_in, oracle=expected,
               runs=runs, median_s=med, jar=args.jar,
               ratio_ours_vs_spark=med["Spark"] / med["ours"] if len(med) == 2 else None)
    return page, raw, not wrong


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--throughput", action="store_true", help="devices in step, Spark's inner join vs ours, timed")
    ap.add_argument("--devices", type=int, default=60, help="delayed mode: devices (10%% fast, 20%% uploaders)")
    ap.add_argument("--minutes", type=int, default=20, help="delayed mode: minutes of event time")
    ap.add_argument("--scale", choices=sorted(SCALES), default="default", help="throughput mode: volume")
    ap.add_argument("--batch-s", type=int, default=60, help="throughput mode: seconds of arrival per micro-batch")
    ap.add_argument("--runs", type=int, default=3, help="throughput mode: timed runs per method")
    ap.add_argument("--warmups", type=int, default=1, help="throughput mode: untimed warm-up runs per method")
    ap.add_argument("--alarm-share", type=float, default=0.10)
    ap.add_argument("--lateness", default="30 seconds")
    ap.add_argument("--seed", type=int, default=43)
    ap.add_argument("--inner-only", action="store_true", help="delayed mode: skip the left outer joins")
    ap.add_argument("--methods", default="Spark,ours",
                    help="throughput mode: which joins to time, of Spark,ours (ours alone: an A/B of two jars)")
    ap.add_argument("--jar", default=None, help="another build of the keyed-watermarks jar (an A/B of two builds)")
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--out", type=Path, default=None,
                    help="result page (default benchmarks/results/joins.md, --throughput: joins-throughput.md); "
                         "the raw data goes beside it (.json)")
    args = ap.parse_args(argv)
    command = ".venv/bin/python benchmarks/joins.py " + " ".join(sys.argv[1:] if argv is None else argv)
    out = args.out or ROOT / "benchmarks" / "results" / ("joins-throughput.md" if args.throughput else "joins.md")
    page, raw, ok = (throughput_mode if args.throughput else delayed_mode)(args, command.strip())
    print(page)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page)
    out.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str) + "\n")
    log(f"wrote {out} and {out.with_suffix('.json')}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
