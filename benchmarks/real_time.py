#!/usr/bin/env python
"""Real-time mode latency (issue 41): Kafka -> keyed windows -> Kafka, from producing a window's
closing row to the window reaching the sink, p50 / p99, for

- ``keyed-rtm``: ours, ``real_time=True``, ``trigger(realTime=...)``;
- ``spark-rtm``: Spark's ``withWatermark`` + ``groupBy(device, window)``, ``trigger(realTime=...)``;
- ``keyed-1s``: ours (micro-batch plan), ``trigger(processingTime="1 second")``.

Before measuring, the driver waits until the query has written a window end to end (rows of
devices ``warmup-...``, left out of the results): a real-time batch's tasks start, generate their
code and connect their shuffle tens of seconds after ``start()`` returns on 2 cores, and rows
produced before that queue behind it. Then ``--warmup`` seconds of the same load on other devices
(the JVM compiles the per-row paths; the cold start's backlog drains), and again a window end to
end. Then a producer writes ``--rate`` events/s round-robin over ``--devices`` devices (event time
= the wall clock when produced, so each device's rows are in order) into a topic of 2 partitions,
for ``--seconds``. Each variant runs in its own Spark process (``local[4]``: 2 source + 2 shuffle
partitions) on its own topics and writes its windows to a Kafka topic (key = device, value =
JSON). A window's *closing row* is its device's first row whose event time is at least the
window's end plus the lateness (the row that moves the device's watermark past it); its latency is
the sink message's timestamp (Kafka CreateTime, set by Spark's producer when it writes the window)
minus the closing row's produce time. Spark's aggregation in update mode writes a window again
whenever it changes: its last write counts. Windows whose closing row was not produced are left
out. ``2nd half``: the windows closed in the second half of the production (a warm pipeline).
``last row``: from the window's last row to its final write, which for ``spark-rtm`` is the
pipeline's own latency (its update answers that row).

Correctness, per variant: the windows written (device, start, end, count) against the
record-at-a-time model (tests/reference_model.py, ``run_model_per_row``) over the rows produced:
``missing`` and ``duplicated`` must be 0 for ``keyed-rtm``. (The model's windows are the same
under the micro-batch rule here: rows are in order per device.)

    .venv/bin/python benchmarks/real_time.py                 # starts a broker (dev/kafka_broker.py)
    .venv/bin/python benchmarks/real_time.py --seconds 60 --variants keyed-rtm spark-rtm keyed-1s \\
        --out benchmarks/results/real-time.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dev"))
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(REPO / "tests"))

VARIANTS = ("keyed-rtm", "spark-rtm", "keyed-1s")
SECOND = 1_000_000
#: The device of the readiness rows (see ``await_pipeline``); its windows are left out of the results.
WARMUP_DEVICE = "warmup"


# -- the Spark side (one process per variant) --------------------------------------------------


def pipeline(args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    import keyed_watermarks as kw
    import kafka_real_time as ex

    spark = ex.build_session("local[4]", ex.KAFKA_PACKAGE, 2)
    events = ex.kafka_events(spark, args.bootstrap, args.input_topic)
    aggs = (F.count("*").alias("n"), F.sum("temp").alias("sum_temp"), F.max("temp").alias("max_temp"))
    lateness, window = f"{args.lateness} seconds", f"{args.window} seconds"
    if args.pipeline == "keyed-rtm":
        windows = ex.keyed_windows(events, lateness, window)
    elif args.pipeline == "keyed-1s":
        windows = kw.keyed_watermark(events, key="device", event_time="ts", lateness=lateness).window(window) \
            .agg(*aggs)
    else:
        windows = events.withWatermark("ts", lateness).groupBy("device", F.window("ts", window)).agg(*aggs)
    writer = (ex.to_kafka(windows).writeStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.output_topic)
              .option("checkpointLocation", args.checkpoint))
    if args.pipeline == "keyed-1s":
        writer = writer.outputMode("append").trigger(processingTime="1 second")
    else:
        writer = writer.outputMode("update").trigger(realTime=args.batch)
    query = writer.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"started {query.id}", flush=True)
    while not stop.wait(1.0):
        if query.exception() is not None:
            print(f"failed: {query.exception()}", flush=True)
            return 1
    query.stop()
    spark.stop()
    return 0


# -- the driver ------------------------------------------------------------------------------


def _message(device: str, now_ms: int, temp: float) -> Tuple[bytes, bytes]:
    ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_ms // 1000)) + f".{now_ms % 1000:03d}Z"
    return device.encode(), json.dumps({"ts": ts, "temp": temp}).encode()


def await_pipeline(bootstrap: str, topic_in: str, topic_out: str, window_s: int, lateness_s: int,
                   timeout_s: float) -> float:
    """Waits until the query writes a window end to end, so that the measured rows do not queue
    behind the start of its first real-time batch (its tasks' launch, code generation, the shuffle's
    connections: tens of seconds on 2 cores, well after ``start()`` returned). Every 5 s, two rows of
    device ``warmup`` whose second closes the window of the first (event times in the past, so that
    Spark's global watermark is not moved past the measured rows), a new device each time
    (``warmup-r<n>``), until one of their windows reaches the sink. Called again after the warm-up
    load: its rows follow the warm-up's in their partition, so the backlog is through when its window
    is written. Returns the seconds waited."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rtm-bench-ready-{time.time_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic_out, 0, OFFSET_BEGINNING)])
    begin = time.monotonic()
    next_send = begin
    sent = set()
    try:
        while time.monotonic() - begin < timeout_s:
            if time.monotonic() >= next_send:
                device = f"{WARMUP_DEVICE}-r{time.time_ns()}"
                sent.add(device)
                now_ms = int(time.time() * 1000)
                first_ms = now_ms - (window_s + lateness_s + 1) * 1000
                for ms in (first_ms, now_ms):
                    key, value = _message(device, ms, 0.0)
                    p.produce(topic_in, key=key, value=value, timestamp=ms)
                p.flush(10)
                next_send = time.monotonic() + 5
            m = c.poll(0.5)
            if m is not None and m.error() is None and json.loads(m.value()).get("device") in sent:
                return time.monotonic() - begin
    finally:
        c.close()
    raise RuntimeError(f"no window of device {WARMUP_DEVICE!r} in {topic_out} within {timeout_s:.0f} s")


def produce(bootstrap: str, topic: str, rate: int, devices: int, seconds: float,
            prefix: str = "d") -> List[Tuple[str, int, float, int]]:
    """(device, event time micros, temp, produce time ms) of every row, in produce order."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "enable.idempotence": True})
    sent = []
    start = time.time()
    n = 0
    while time.time() - start < seconds:
        due = start + n / rate
        now = time.time()
        if due > now:
            time.sleep(due - now)
        now_ms = int(time.time() * 1000)
        device = f"{prefix}{n % devices:04d}"
        t = now_ms * 1000
        temp = float(n % 100)
        key, value = _message(device, now_ms, temp)
        p.produce(topic, key=key, value=value, timestamp=now_ms)
        sent.append((device, t, temp, now_ms))
        n += 1
        if n % 500 == 0:
            p.poll(0)
    p.flush(60)
    return sent


def consume(bootstrap: str, topic: str, quiet_s: float) -> List[Tuple[dict, int]]:
    """Every message of the topic's partition 0 (value, timestamp ms), until none came for
    ``quiet_s`` (from the end of production)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rtm-bench-{time.time_ns()}",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out, last = [], time.monotonic()
    while time.monotonic() - last < quiet_s:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            value = json.loads(m.value())
            if not str(value.get("device")).startswith(WARMUP_DEVICE):
                out.append((value, m.timestamp()[1]))
            last = time.monotonic()
    c.close()
    return out


def percentile(xs: List[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))] if xs else float("nan")


def analyse(sent, got, lateness_s: int, window_s: int) -> Dict[str, object]:
    from reference_model import run_model_per_row

    # The model key by key (keys never interact without a skew bound; one model over every row
    # would be quadratic in the open windows).
    rows_of: Dict[str, list] = defaultdict(list)
    by_device: Dict[str, List[Tuple[int, int]]] = defaultdict(list)
    for d, t, v, ms in sent:
        rows_of[d].append((d, t, v))
        by_device[d].append((t, ms))
    emitted = [w for rows in rows_of.values()
               for w in run_model_per_row([rows], lateness_s * SECOND, window_s * SECOND).emitted]
    want = Counter((w.key, w.start, w.end, len(w.values)) for w in emitted)
    # The closing row of each window: its device's first row at or past end + lateness.
    closing: Dict[Tuple[str, int], int] = {}
    # The window's last row (Spark's update mode writes the window's final value with it).
    last_row: Dict[Tuple[str, int], int] = {}
    for w in emitted:
        closing[(w.key, w.end)] = next(ms for t, ms in by_device[w.key] if t >= w.end + lateness_s * SECOND)
        last_row[(w.key, w.end)] = max(ms for t, ms in by_device[w.key] if w.start <= t < w.end)
    last_write: Dict[Tuple[str, int, int], Tuple[int, int]] = {}
    for v, ts in got:
        k = (v["device"], v["start_us"], v["end_us"])
        last_write[k] = (v["n"], ts)
    written = Counter((v["device"], v["start_us"], v["end_us"], v["n"]) for v, _ in got)
    final = Counter((k[0], k[1], k[2], n) for k, (n, _) in last_write.items())
    latencies = [ts - closing[(d, e)] for (d, s, e), (n, ts) in last_write.items()
                 if (d, e) in closing and (d, s, e, n) in want]
    # The same for the windows closed in the second half of the production: the pipeline warmed up.
    half = (sent[0][3] + sent[-1][3]) / 2 if sent else 0
    latencies_2nd = [ts - closing[(d, e)] for (d, s, e), (n, ts) in last_write.items()
                     if (d, e) in closing and (d, s, e, n) in want and closing[(d, e)] >= half]
    since_last = [ts - last_row[(d, e)] for (d, s, e), (n, ts) in last_write.items()
                  if (d, e) in last_row and (d, s, e, n) in want]
    return {
        "windows_model": sum(want.values()),
        "windows_written": len(got),
        "missing": sum((want - final).values()),
        "duplicated": sum(c - 1 for k, c in written.items() if c > 1 and k in want),
        "unexpected": sum((final - want).values()),
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies) if latencies else float("nan"),
        "second_half_p50_ms": percentile(latencies_2nd, 0.50),
        "second_half_p99_ms": percentile(latencies_2nd, 0.99),
        # From the window's last row to its final write: Spark's update mode answers that row, so
        # this is spark-rtm's pipeline latency (row in -> write out); ours adds the wait for the
        # closing row (the lateness plus the device's gap between rows).
        "last_row_p50_ms": percentile(since_last, 0.50),
        "last_row_p99_ms": percentile(since_last, 0.99),
        "measured": len(latencies),
    }


def run_variant(variant: str, bootstrap: str, args: argparse.Namespace, work: Path) -> Dict[str, object]:
    from iot_producer import ensure_topic
    from kafka_real_time import stop_process

    stamp = time.strftime("%H%M%S")
    topic_in, topic_out = f"rtm-bench-in-{variant}-{stamp}", f"rtm-bench-out-{variant}-{stamp}"
    ensure_topic(bootstrap, topic_in, 2)
    ensure_topic(bootstrap, topic_out, 1)
    log_path = work / f"{variant}.log"
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    cmd = [sys.executable, __file__, "--pipeline", variant, "--bootstrap", bootstrap, "--input-topic", topic_in,
           "--output-topic", topic_out, "--checkpoint", str(work / f"cp-{variant}-{stamp}"),
           "--lateness", str(args.lateness), "--window", str(args.window), "--batch", args.batch]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 600
            while "started " not in log_path.read_text():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{variant} did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
            ready_s = await_pipeline(bootstrap, topic_in, topic_out, args.window, args.lateness, args.ready_timeout)
            print(f"{variant}: first window written {ready_s:.0f} s after start() returned", flush=True)
            if args.warmup > 0:
                # The same load on other devices first (left out of the results): the JVM compiles the
                # per-row paths, and the backlog of a cold start drains before the measured rows.
                produce(bootstrap, topic_in, args.rate, args.devices, args.warmup, prefix=f"{WARMUP_DEVICE}-d")
                drain_s = await_pipeline(bootstrap, topic_in, topic_out, args.window, args.lateness,
                                         args.ready_timeout)
                print(f"{variant}: warm-up of {args.warmup:.0f} s through {drain_s:.0f} s after it", flush=True)
            sent = produce(bootstrap, topic_in, args.rate, args.devices, args.seconds)
            got = consume(bootstrap, topic_out, args.quiet)
        finally:
            stop_process(proc)
    return {"variant": variant, "rows": len(sent), "ready_s": round(ready_s, 1), **analyse(sent, got, args.lateness, args.window)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pipeline", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--input-topic", help=argparse.SUPPRESS)
    p.add_argument("--output-topic", help=argparse.SUPPRESS)
    p.add_argument("--checkpoint", help=argparse.SUPPRESS)
    p.add_argument("--bootstrap", help="a running broker (default: start one with dev/kafka_broker.py)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--rate", type=int, default=1000, help="events per second")
    p.add_argument("--devices", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=60.0, help="how long the producer writes")
    p.add_argument("--window", type=int, default=10, help="window size, seconds")
    p.add_argument("--lateness", type=int, default=2, help="lateness, seconds")
    p.add_argument("--batch", default="5 minutes", help="the real-time batch duration")
    p.add_argument("--warmup", type=float, default=30.0,
                   help="after the query's first window: seconds of the same load on other devices "
                        "(left out of the results), then until a window after it is written, before measuring")
    p.add_argument("--ready-timeout", type=float, default=300.0,
                   help="seconds to wait for the query's first window (readiness rows, device 'warmup')")
    p.add_argument("--quiet", type=float, default=20.0, help="stop reading the sink after this many quiet seconds")
    p.add_argument("--work", default=str(REPO / "build" / "real-time-bench"))
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args(argv)
    if args.pipeline:
        return pipeline(args)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    broker = None
    if args.bootstrap is None:
        import kafka_broker
        broker = kafka_broker.start(state_dir=work / "kafka-state")
    bootstrap = args.bootstrap or broker.bootstrap
    try:
        results = []
        for v in args.variants:
            r = run_variant(v, bootstrap, args, work)
            print(json.dumps(r), flush=True)
            results.append(r)
    finally:
        if broker is not None:
            broker.stop()
    print("| variant | rows | windows (model) | written | missing | duplicated | p50 ms | p99 ms | max ms "
          "| 2nd half p50 / p99 ms | last row p50 / p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['variant']} | {r['rows']} | {r['windows_model']} | {r['windows_written']} | {r['missing']} | "
              f"{r['duplicated']} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['max_ms']:.0f} | "
              f"{r['second_half_p50_ms']:.0f} / {r['second_half_p99_ms']:.0f} | "
              f"{r['last_row_p50_ms']:.0f} / {r['last_row_p99_ms']:.0f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"args": vars(args), "load": os.getloadavg(), "results": results},
                                             indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
