"""Issue 27's streams: Spark's global watermark, today's keyed default and ``closing="fleet"``.

Usage: .venv/bin/python benchmarks/fleet_policy.py [--seed 27] [--out benchmarks/results/fleet_policy.md]
       .venv/bin/python benchmarks/fleet_policy.py --engine [--out benchmarks/results/fleet_policy_engine.md]
       .venv/bin/python benchmarks/fleet_policy.py --engine sparse [--out benchmarks/results/fleet_policy_sparse_engine.md]

What a method counts, emits and when is decided by its rules alone, not by the machine, so each
method runs as its reference model over the same micro-batches (no Spark, no timing):

- Spark (``withWatermark(ts, L)`` + ``groupBy(key, window(ts, S))``, append mode), by the rules
  docs/semantics.md measured on every Spark line: ``E_N`` = max event time (ms) of batches
  ``< N`` minus ``L``; in batch ``N`` a row is late when its window's end ``<= E_{N-1}``; the
  windows with end ``<= E_N`` are emitted in batch ``N`` (its rows merged first);
- keyed, today's default (``max_skew`` one hour) and ``closing="fleet"``:
  ``tests/policy_model.py``, the model the in-memory and end-to-end tests hold the engine to.

Streams (seeded; ``--seed``): 500 keys, 120,000 events uniform over 15 minutes of event time,
5-second micro-batches cut by arrival time, 10-second tumbling windows, lateness 1 second:

- ``in step, 5%`` / ``50%``: every key keeps pace (arrival = event time + 0-0.2 s); 5% / 50% of
  the events are delayed by a further uniform 0-10 s;
- ``sparse in step, 50%`` (issue 42): the same keys in step, but each key sends on a schedule,
  one event every 3.75 s (500 keys x 900 s / 120,000 events) from a random phase, so a key's
  max event time moves about once per micro-batch; 50% of the events delayed 0-10 s;
- ``20% / 50% of keys delayed, uniform / log-normal``: those keys' events all arrive late by the
  key's own delay, uniform in 10-120 s, or log-normal (median 30 s, sigma 0.8) clipped to
  10-120 s; the others keep pace;
- ``IoT demo``: ``examples/iot_demo.py``'s fleet with its own settings (100 devices: fast, slow,
  batch uploaders; 30 minutes; 15-second micro-batches; 1-minute windows; lateness 30 s).

``--engine`` instead runs the IoT demo's generator at a smaller scale (40 devices, 15 minutes)
through the engine itself (Spark's file source, one file per micro-batch, ``Trigger.AvailableNow``,
the demo's ``foreachBatch`` stamping sink), today's default and ``closing="fleet"``, and puts the
same measures beside the models' on the same stream: the engine's numbers should equal its model's.
``--engine sparse`` does the same for the sparse stream in step (issue 42), smaller (100 keys over
200 s, each key at the same rate: one event every 3.75 s), ``closing="fleet"`` and Spark's own
``withWatermark`` aggregation on the engine (Spark's late rows: the progress reports'
``numRowsDroppedByWatermark``), beside all three models.

Per method and stream: **accuracy** (events aggregated, i.e. not late / events), **wrong
windows** (of the (key, window) pairs with events and an end before the horizon, those never
emitted or emitted with another count than all their events: the horizon is the last event time
minus the largest delay minus two windows, so every method has had time to emit them),
**emit delay** p50 / p95 of those emitted windows (the processing time at which the emitting
micro-batch's input was complete, minus the window's end: the demo's definition, in event-time
seconds, independent of the machine), and **state rows** (the most over the micro-batches:
Spark one per open (key, window); keyed one per key in state, plus its skew for the fleet policy).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))

from policy_model import Policy, run_policy_model  # noqa: E402
from reference_model import spark_watermark_ms  # noqa: E402

SECOND = 1_000_000
# (key, event time us, arrival us)
Event = Tuple[str, int, int]


# ------------------------------------------------------------------------------------------------
# Streams
# ------------------------------------------------------------------------------------------------

def in_step(rng: random.Random, share_delayed: float, keys: int = 500, events: int = 120_000,
            span_s: int = 900) -> List[Event]:
    out = []
    for _ in range(events):
        k = f"k{rng.randrange(keys):03d}"
        t = rng.uniform(0, span_s)
        d = rng.uniform(0, 0.2) + (rng.uniform(0, 10) if rng.random() < share_delayed else 0.0)
        out.append((k, int(t * SECOND), int((t + d) * SECOND)))
    return out


def sparse_in_step(rng: random.Random, share_delayed: float, keys: int = 500, events: int = 120_000,
                   span_s: int = 900) -> List[Event]:
    """Every key on its own schedule: one event every ``span_s * keys / events`` seconds from a
    random phase, arrival = event time + 0-0.2 s, a share of the events delayed a further 0-10 s."""
    period = span_s * keys / events
    out = []
    for i in range(keys):
        k = f"k{i:03d}"
        t = rng.uniform(0, period)
        while t < span_s:
            d = rng.uniform(0, 0.2) + (rng.uniform(0, 10) if rng.random() < share_delayed else 0.0)
            out.append((k, int(t * SECOND), int((t + d) * SECOND)))
            t += period
    return out


def delayed_keys(rng: random.Random, share_keys: float, lognormal: bool, keys: int = 500,
                 events: int = 120_000, span_s: int = 900) -> List[Event]:
    delay: Dict[str, float] = {}
    for i in range(keys):
        k = f"k{i:03d}"
        if rng.random() < share_keys:
            d = min(120.0, max(10.0, rng.lognormvariate(math.log(30.0), 0.8))) if lognormal \
                else rng.uniform(10, 120)
            delay[k] = d
        else:
            delay[k] = 0.0
    out = []
    for _ in range(events):
        k = f"k{rng.randrange(keys):03d}"
        t = rng.uniform(0, span_s)
        d = delay[k] + rng.uniform(0, 0.2)
        out.append((k, int(t * SECOND), int((t + d) * SECOND)))
    return out


def iot_fleet() -> Tuple[List[Event], Dict[str, str], int, int, int]:
    """The demo's events, each device's class, and its batch, window and lateness (seconds)."""
    from iot_demo import Config, generate

    cfg = Config()
    events, classes = generate(cfg)
    out = [(e.device, e.ts_ms * 1000, e.arrival_ms * 1000) for e in events]
    lateness_s = int(cfg.lateness.split()[0])
    window_s = int(cfg.window.split()[0]) * (60 if "minute" in cfg.window else 1)
    return out, classes, cfg.batch_s, window_s, lateness_s


def micro_batches(events: Sequence[Event], batch_s: int) -> List[List[tuple]]:
    """Rows (key, t, event index, None, None) by arrival; batch N holds arrivals in [N*B, (N+1)*B)."""
    by_batch: Dict[int, List[tuple]] = defaultdict(list)
    for i, (k, t, a) in enumerate(sorted(events, key=lambda e: (e[2], e[0], e[1]))):
        by_batch[a // (batch_s * SECOND)].append((k, t, i, None, None))
    last = max(by_batch)
    return [by_batch.get(n, []) for n in range(last + 1)]


# ------------------------------------------------------------------------------------------------
# Spark's rules (docs/semantics.md, "How this differs from Spark's global watermark")
# ------------------------------------------------------------------------------------------------

def run_spark_model(batches: Sequence[Sequence[tuple]], size: int, lateness: int):
    """(emitted [(key, start, end, batch, values)], late rows per key, state rows per batch)."""
    emitted, late, state_rows = [], Counter(), []
    open_w: Dict[Tuple[str, int], List[int]] = {}
    max_ms: Optional[int] = None
    marks: List[Optional[int]] = []  # E_N in micros (None: undefined)
    n = 0
    while True:
        batch = batches[n] if n < len(batches) else []
        e_ms = spark_watermark_ms(max_ms, lateness)
        marks.append(None if e_ms is None else e_ms * 1000)
        if n >= len(batches) and (len(marks) < 2 or marks[-1] == marks[-2]):
            break  # no data and the watermark did not move: Spark runs no further batch
        check = marks[n - 1] if n >= 1 else None  # late rows: the watermark one batch older
        for k, t, v, _, _ in batch:
            start = t - t % size
            if check is not None and start + size <= check:
                late[k] += 1
            else:
                open_w.setdefault((k, start), []).append(v)
        for k, t, *_ in batch:
            max_ms = t // 1000 if max_ms is None else max(max_ms, t // 1000)
        e = marks[n]
        if e is not None:
            for (k, start) in sorted(w for w in open_w if w[1] + size <= e):
                emitted.append((k, start, start + size, n, tuple(open_w.pop((k, start)))))
        state_rows.append(len(open_w))
        n += 1
    return emitted, late, state_rows


# ------------------------------------------------------------------------------------------------
# Measures
# ------------------------------------------------------------------------------------------------

def quantile(values: Sequence[float], q: float) -> Optional[float]:
    if not values:
        return None
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


def measure(events: Sequence[Event], size: int, batch_s: int, emitted, state_rows: Sequence[int],
            classes: Optional[Dict[str, str]] = None) -> Dict[str, dict]:
    """Per device class ("all" for every key): accuracy, wrong windows, emit delays, state rows."""
    max_delay = max(a - t for _, t, a in events)
    horizon = max(t for _, t, _ in events) - max_delay - 2 * size
    truth: Counter = Counter()
    for k, t, _ in events:
        truth[(k, t - t % size)] += 1
    got = {(k, s): (len(vals), b) for k, s, _, b, vals in emitted}
    cls_of = (lambda k: classes[k]) if classes else (lambda k: "all")
    groups = ["all"] + (sorted(set(classes.values())) if classes else [])
    out = {}
    for g in groups:
        member = (lambda k: True) if g == "all" else (lambda k, g=g: cls_of(k) == g)
        wrong = checked = 0
        delays = []
        for (k, s), n_true in truth.items():
            if not member(k) or s + size > horizon:
                continue
            checked += 1
            if (k, s) not in got or got[(k, s)][0] != n_true:
                wrong += 1
            if (k, s) in got:
                delays.append(((got[(k, s)][1] + 1) * batch_s * SECOND - (s + size)) / SECOND)
        out[g] = dict(wrong=wrong, checked=checked, p50=quantile(delays, 0.5), p95=quantile(delays, 0.95))
    out["all"]["state_rows"] = max(state_rows) if state_rows else 0
    return out


def counted_per_group(batches, late_per_key: Dict[str, int], classes: Optional[Dict[str, str]]):
    total: Counter = Counter()
    for b in batches:
        for r in b:
            total[r[0]] += 1
    groups: Dict[str, List[int]] = defaultdict(lambda: [0, 0])
    for k, n in total.items():
        for g in ["all"] + ([classes[k]] if classes else []):
            groups[g][0] += n
            groups[g][1] += late_per_key.get(k, 0)
    return {g: 1.0 - late / n for g, (n, late) in groups.items()}


def run_methods(events, batch_s: int, window_s: int, lateness_s: int, classes=None) -> Dict[str, dict]:
    size, lateness = window_s * SECOND, lateness_s * SECOND
    batches = micro_batches(events, batch_s)
    results = {}
    results["Spark withWatermark + groupBy"] = run_spark_model(batches, size, lateness)
    for name, policy in [("keyed, default (max_skew 1 h)", Policy(lateness)),
                         ('keyed, closing="fleet"', Policy(lateness, fleet=True))]:
        m = run_policy_model(batches, size, policy)
        late_per_key = Counter()
        for (_, k), n in m.late.items():
            late_per_key[k] += n
        per_key_vars = 2 if policy.fleet else 1
        results[name] = (m.emitted, late_per_key, [per_key_vars * s for s in m.state_keys])
    out = {}
    for name, (emitted, late_per_key, rows) in results.items():
        r = measure(events, size, batch_s, emitted, rows, classes)
        for g, acc in counted_per_group(batches, late_per_key, classes).items():
            r[g]["accuracy"] = acc
        out[name] = r
    return out


# ------------------------------------------------------------------------------------------------
# The engine on the IoT demo's stream (--engine)
# ------------------------------------------------------------------------------------------------

def engine_iot_config():
    """The demo's generator, smaller: 40 devices (4 fast, 8 uploaders) over 15 minutes, uploads
    every 3-5 minutes (so the horizon of ``measure`` leaves windows to compare)."""
    from iot_demo import Config

    return Config(devices=40, fast=4, uploaders=8, duration_s=15 * 60, upload_every_min=(3.0, 5.0))


def run_to_sink(spark, df, workdir: Path, tag: str, name: str, batch_s: int,
                conf: Optional[Dict[str, str]] = None) -> Tuple[object, list, object]:
    """Runs ``df`` over its whole input (availableNow) into the demo's stamping sink under
    ``workdir`` (``tag``: its output and checkpoint), with the session configurations ``conf``
    for the run. Returns the query, its windows as ``measure`` takes them (key, start, end,
    emitting batch, one value per row) and its output rows (a keyed stage's report rows too)."""
    from iot_demo import _session_conf, _stamping_sink, _windows

    checkpoint = workdir / "checkpoints" / tag
    with _session_conf(spark, conf or {}):
        query = (df.writeStream.foreachBatch(_stamping_sink(workdir / "output" / tag, checkpoint))
                 .outputMode("append").option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{name}: {query.exception()}")
    rows = spark.read.parquet(str(workdir / "output" / tag))
    windows = rows.where("kw_kind = 'window'") if "kw_kind" in rows.columns else rows
    # The input's slices are every batch_s of arrival (none empty here), so the batch that
    # emitted a window is its input's arrival cutoff / batch_s - 1.
    emitted = [(r.device, r.start_s * SECOND, r.end_s * SECOND, r.emitted_at_s // batch_s - 1, tuple(range(r.n)))
               for r in _windows(windows, "emitted_at_s").collect()]
    return query, emitted, rows


def late_per_key(rows) -> Counter:
    """A keyed stage's late rows per key, from its report rows."""
    from pyspark.sql import functions as F

    return Counter({r.device: int(r.late) for r in rows.where("kw_kind = 'late'").groupBy("device")
                    .agg(F.sum("kw_late_rows").alias("late")).collect()})


def run_engine_iot(workdir: Path) -> Tuple[List[Event], Dict[str, str], int, int, int, Dict[str, tuple]]:
    """Each keyed method's (emitted, late rows per key) from streaming queries over the demo's files."""
    from pyspark.sql import functions as F

    import keyed_watermarks as kw
    from iot_demo import EVENT_SCHEMA, _session, generate, write_batches

    cfg = engine_iot_config()
    raw, classes = generate(cfg)
    events = [(e.device, e.ts_ms * 1000, e.arrival_ms * 1000) for e in raw]
    window_s = int(cfg.window.split()[0]) * (60 if "minute" in cfg.window else 1)
    lateness_s = int(cfg.lateness.split()[0])
    write_batches(raw, workdir / "input", cfg)
    spark = _session()
    out = {}
    try:
        for name, options in [("keyed, default (max_skew 1 h)", {}), ('keyed, closing="fleet"', {"closing": "fleet"})]:
            tag = "fleet" if options else "default"
            stream = (spark.readStream.schema(EVENT_SCHEMA).option("maxFilesPerTrigger", 1)
                      .parquet(str(workdir / "input")))
            df = (kw.keyed_watermark(stream, key="device", event_time="ts", lateness=cfg.lateness, **options)
                  .window(cfg.window).agg_with_report(F.count("*").alias("n")))
            _, emitted, rows = run_to_sink(spark, df, workdir, tag, name, cfg.batch_s)
            late = late_per_key(rows)
            out[name] = (emitted, late)
            print(f"engine, {name}: {len(emitted)} windows, {sum(late.values())} late rows", file=sys.stderr)
    finally:
        spark.stop()
    return events, classes, cfg.batch_s, window_s, lateness_s, out


SPARSE_ENGINE = dict(keys=100, events=5_333, span_s=200)  # one event per key every 3.75 s, as at full scale


def run_engine_events(workdir: Path, events: Sequence[Event], batch_s: int, window_s: int,
                      lateness_s: int) -> Dict[str, tuple]:
    """Spark's ``withWatermark`` aggregation and ``closing="fleet"`` on the engine over ``events``
    (one file per ``batch_s`` of arrival time): each method's (emitted, late rows per key);
    Spark's late rows are its progress reports' total (under the key "*")."""
    from pyspark.sql import functions as F

    import keyed_watermarks as kw
    from iot_demo import Config, Event as DemoEvent, _session, write_batches

    demo_events = [DemoEvent(k, t // 1000, 0.0, a // 1000) for k, t, a in events]
    write_batches(demo_events, workdir / "input", Config(batch_s=batch_s))
    files = sum(1 for _ in (workdir / "input").iterdir())
    spark = _session()
    window, lateness = f"{window_s} seconds", f"{lateness_s} seconds"
    out = {}
    try:
        for name, options in [("Spark withWatermark + groupBy", None), ('keyed, closing="fleet"', {"closing": "fleet"})]:
            tag = "spark" if options is None else ("fleet" if options else "default")
            stream = (spark.readStream.schema("device STRING, ts TIMESTAMP, temp DOUBLE")
                      .option("maxFilesPerTrigger", 1).parquet(str(workdir / "input")))
            if options is None:
                df = (stream.withWatermark("ts", lateness).groupBy("device", F.window("ts", window))
                      .agg(F.count("*").alias("n")))
            else:
                df = (kw.keyed_watermark(stream, key="device", event_time="ts", lateness=lateness, **options)
                      .window(window).agg_with_report(F.count("*").alias("n")))
            keep = str(3 * files + 10)
            query, emitted, rows = run_to_sink(spark, df, workdir, tag, name, batch_s, {
                "spark.sql.streaming.numRecentProgressUpdates": keep, "spark.sql.streaming.minBatchesToRetain": keep})
            if options is None:
                dropped = sum(op.numRowsDroppedByWatermark for p in query.recentProgress for op in p.stateOperators)
                late = Counter({"*": dropped})
            else:
                late = late_per_key(rows)
            out[name] = (emitted, late)
            print(f"engine, {name}: {len(emitted)} windows, {sum(late.values())} late rows", file=sys.stderr)
    finally:
        spark.stop()
    return out


def engine_sparse_report(seed: int) -> str:
    import tempfile

    batch_s, window_s, lateness_s = 5, 10, 1
    events = sparse_in_step(random.Random(seed), 0.50, **SPARSE_ENGINE)
    with tempfile.TemporaryDirectory(prefix="kw-fleet-sparse-") as tmp:
        engine = run_engine_events(Path(tmp), events, batch_s, window_s, lateness_s)
    size = window_s * SECOND
    total = len(events)
    results = {f"model: {m}": r for m, r in run_methods(events, batch_s, window_s, lateness_s).items()}
    for name, (emitted, late) in engine.items():
        r = measure(events, size, batch_s, emitted, [0])
        r["all"]["accuracy"] = 1.0 - sum(late.values()) / total
        results[f"engine: {name}"] = r
    lines = [f"Sparse keys in step (issue 42), smaller: {SPARSE_ENGINE['keys']} keys, one event per key every "
             f"3.75 s over {SPARSE_ENGINE['span_s']} s, 50% of the events delayed 0-10 s; "
             f"{batch_s} s batches, {window_s} s windows, lateness {lateness_s} s: {total:,} events (seed {seed}).", "",
             "| run | accuracy | wrong windows | emit delay p50 / p95 (s) |", "|---|---:|---:|---:|"]
    for name, r in results.items():
        x = r["all"]
        lines.append(f"| {name} | {100 * x['accuracy']:.2f}% | {x['wrong']:,} of {x['checked']:,} | {fmt_delay(x)} |")
    return "\n".join(lines) + "\n"


def engine_report() -> str:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kw-fleet-engine-") as tmp:
        events, classes, batch_s, window_s, lateness_s, engine = run_engine_iot(Path(tmp))
    size = window_s * SECOND
    batches = micro_batches(events, batch_s)
    results = {f"model: {m}": r for m, r in run_methods(events, batch_s, window_s, lateness_s, classes).items()}
    for name, (emitted, late) in engine.items():
        r = measure(events, size, batch_s, emitted, [0], classes)
        for g, acc in counted_per_group(batches, late, classes).items():
            r[g]["accuracy"] = acc
        results[f"engine: {name}"] = r
    lines = [f"IoT demo's generator, 40 devices (4 fast, 8 uploaders), 15 minutes, {batch_s} s batches, "
             f"{window_s} s windows, lateness {lateness_s} s: {len(events):,} events.", "",
             "| class | run | accuracy | wrong windows | emit delay p50 / p95 (s) |", "|---|---|---:|---:|---:|"]
    for g in ["all"] + sorted(set(classes.values())):
        for name, r in results.items():
            x = r[g]
            lines.append(f"| {g} | {name} | {100 * x['accuracy']:.2f}% | {x['wrong']:,} of {x['checked']:,} | "
                         f"{fmt_delay(x)} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# Report
# ------------------------------------------------------------------------------------------------

def fmt_delay(r: dict) -> str:
    if r["p50"] is None:
        return "–"
    return f"{r['p50']:.0f} / {r['p95']:.0f}"


def main(argv=None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--engine", nargs="?", const="iot", choices=["iot", "sparse"], default=None,
                    help="a stream (smaller) through the engine, beside the models: the IoT demo's (default vs "
                         "fleet) or the sparse keys in step of issue 42 (Spark and fleet)")
    args = ap.parse_args(argv)
    started = time.time()
    if args.engine == "sparse":
        report = engine_sparse_report(args.seed) + f"\n({time.time() - started:.0f} s)\n"
        print(report)
        if args.out:
            args.out.write_text("# Issue 42 on the engine: sparse keys in step, Spark and closing='fleet'\n\n"
                                "Written by `benchmarks/fleet_policy.py --engine sparse --out ...`; "
                                "see benchmarks/README.md.\n\n" + report)
        return report
    if args.engine:
        report = engine_report() + f"\n({time.time() - started:.0f} s)\n"
        print(report)
        if args.out:
            args.out.write_text("# Issue 27 on the engine: the IoT demo's stream, keyed default and closing='fleet'\n\n"
                                "Written by `benchmarks/fleet_policy.py --engine --out ...`; "
                                "see benchmarks/README.md.\n\n" + report)
        return report
    streams = []
    for name, make in [
        ("in step, 5% of events delayed 0-10 s", lambda r: in_step(r, 0.05)),
        ("in step, 50% of events delayed 0-10 s", lambda r: in_step(r, 0.50)),
        ("sparse in step (one event per key every 3.75 s), 50% delayed 0-10 s", lambda r: sparse_in_step(r, 0.50)),
        ("20% of keys delayed 10-120 s, uniform", lambda r: delayed_keys(r, 0.2, False)),
        ("50% of keys delayed 10-120 s, uniform", lambda r: delayed_keys(r, 0.5, False)),
        ("20% of keys delayed 10-120 s, log-normal", lambda r: delayed_keys(r, 0.2, True)),
        ("50% of keys delayed 10-120 s, log-normal", lambda r: delayed_keys(r, 0.5, True)),
    ]:
        streams.append((name, make(random.Random(args.seed)), 5, 10, 1, None))
    iot, classes, b, w, lat = iot_fleet()
    streams.append((f"IoT demo ({b} s batches, {w} s windows, lateness {lat} s)", iot, b, w, lat, classes))
    lines = ["| stream | method | accuracy | wrong windows | emit delay p50 / p95 (s) | state rows (max) |",
             "|---|---|---:|---:|---:|---:|"]
    class_lines = []
    for name, events, batch_s, window_s, lateness_s, cls in streams:
        res = run_methods(events, batch_s, window_s, lateness_s, cls)
        for method, r in res.items():
            a = r["all"]
            lines.append(f"| {name} | {method} | {100 * a['accuracy']:.2f}% | {a['wrong']:,} of {a['checked']:,} | "
                         f"{fmt_delay(a)} | {a['state_rows']:,} |")
            if cls:
                for g in sorted(k for k in r if k != "all"):
                    x = r[g]
                    class_lines.append(f"| {g} | {method} | {100 * x['accuracy']:.2f}% | "
                                       f"{x['wrong']:,} of {x['checked']:,} | {fmt_delay(x)} |")
        print(f"{name}: done ({time.time() - started:.0f} s)", file=sys.stderr)
    report = "\n".join(lines) + "\n\nIoT demo per device class:\n\n" + "\n".join(
        ["| class | method | accuracy | wrong windows | emit delay p50 / p95 (s) |", "|---|---|---:|---:|---:|"]
        + class_lines) + f"\n\n(seed {args.seed}; {time.time() - started:.0f} s)\n"
    print(report)
    if args.out:
        # A title: every Markdown file under benchmarks/ is a page of the docs site.
        args.out.write_text(f"# Issue 27: global, keyed default and closing='fleet' (seed {args.seed})\n\n"
                            f"Written by `benchmarks/fleet_policy.py --seed {args.seed} --out ...`; "
                            "see benchmarks/README.md.\n\n" + report)
    return report


if __name__ == "__main__":
    main()
