#!/usr/bin/env python
"""Replays the IoT demo's seeded uneven stream into a Kafka topic.

The events are exactly those of ``examples/iot_demo.py`` (``generate``: fast, slow and
batch-upload devices; out-of-order and retransmitted late events), sent in their simulated
arrival order, at a controlled pace (``--speedup``: simulated seconds per wall-clock second).
Each message has key = device id and a JSON value with the event time::

    {"device": "sensor-007", "ts": "2026-03-02T08:01:02.345Z", "temp": 21.4, "arrival_ms": 63120}

``arrival_ms`` is the simulated arrival time (ms since the stream's start), which lets a reader
tell when a window could have been emitted. A few seeded **malformed** messages are mixed in:
truncated JSON, an unparseable event time, and a message without a key. The messages are a
pure function of the seed (``messages()``), so tests know exactly what was produced.

Client: confluent-kafka (librdkafka, shipped in its wheel): an idempotent producer (no
duplicates from retries, order kept per partition) and the admin client that creates the topic
with several partitions. The ``murmur2`` partitioner puts a key where Java clients would.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from iot_demo import T0, Config, Event, generate  # noqa: E402  (the demo's generator, reused)

MALFORMED_KINDS = ("truncated json", "bad event time", "no key")


@dataclass(frozen=True)
class Message:
    key: Optional[str]
    value: bytes
    arrival_ms: int
    malformed: Optional[str]  # one of MALFORMED_KINDS, or None for a well-formed event
    event: Optional[Event]


def event_json(e: Event) -> dict:
    ts = T0.timestamp() * 1000 + e.ts_ms
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts // 1000)) + f".{int(ts % 1000):03d}Z"
    return {"device": e.device, "ts": iso, "temp": e.temp, "arrival_ms": e.arrival_ms}


def messages(cfg: Config, malformed: int = 6) -> List[Message]:
    """The demo's events in arrival order, plus ``malformed`` seeded malformed messages
    (the kinds in turn), each inserted at a random point of the timeline."""
    events, _ = generate(cfg)
    out = [Message(e.device, json.dumps(event_json(e)).encode(), e.arrival_ms, None, e)
           for e in events]
    rng = random.Random(cfg.seed + 1)
    for i in range(malformed):
        kind = MALFORMED_KINDS[i % len(MALFORMED_KINDS)]
        pos = rng.randrange(len(out) + 1)
        near = out[min(pos, len(out) - 1)]
        body = event_json(near.event) if near.event else {"device": "sensor-000", "ts": "x"}
        if kind == "truncated json":
            msg = Message(body["device"], json.dumps(body).encode()[:25], near.arrival_ms, kind, None)
        elif kind == "bad event time":
            msg = Message(body["device"], json.dumps(dict(body, ts="yesterday")).encode(),
                          near.arrival_ms, kind, None)
        else:
            msg = Message(None, json.dumps(body).encode(), near.arrival_ms, kind, None)
        out.insert(pos, msg)
    return out


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    if topic in existing:
        have = len(existing[topic].partitions)
        if have != partitions:
            raise SystemExit(f"topic {topic!r} exists with {have} partitions, not {partitions}")
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout=60)
    # Created is not yet served: wait until every partition has a leader.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=30).topics[topic]
        if meta.error is None and len(meta.partitions) == partitions and all(
                p.leader >= 0 and p.error is None for p in meta.partitions.values()):
            return
        time.sleep(0.2)
    raise SystemExit(f"topic {topic!r} has no leader for every partition after 60 s")


def produce(bootstrap: str, topic: str, msgs: Sequence[Message], speedup: float,
            log=print) -> dict:
    """Sends ``msgs`` in order, pacing them by ``arrival_ms / speedup`` (0: no pacing);
    returns counts per partition once every message is acknowledged."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,  # acks=all, no duplicates or reordering from retries
        "partitioner": "murmur2",
        "linger.ms": 5,
    })
    per_partition: dict = {}
    errors: List[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            per_partition[msg.partition()] = per_partition.get(msg.partition(), 0) + 1

    start_wall = time.monotonic()
    first_ms = msgs[0].arrival_ms if msgs else 0
    last_report = start_wall
    for i, m in enumerate(msgs):
        if speedup > 0:
            wait = start_wall + (m.arrival_ms - first_ms) / 1000.0 / speedup - time.monotonic()
            if wait > 0:
                producer.flush(wait)  # sleeps while delivering what is in flight
        while True:
            try:
                producer.produce(topic, key=None if m.key is None else m.key.encode(),
                                 value=m.value, on_delivery=delivered)
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.1)
        producer.poll(0)
        if time.monotonic() - last_report > 5:
            log(f"  {i + 1}/{len(msgs)} messages sent (simulated arrival "
                f"{m.arrival_ms / 1000:.0f} s)", flush=True)
            last_report = time.monotonic()
    remaining = producer.flush(120)
    if errors or remaining:
        raise KafkaException(f"{len(errors)} messages failed, {remaining} undelivered: {errors[:3]}")
    return per_partition


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", required=True, help="host:port of the broker")
    ap.add_argument("--topic", default="iot-events")
    ap.add_argument("--partitions", type=int, default=4,
                    help="partitions of the topic if it is created (default: %(default)s)")
    ap.add_argument("--speedup", type=float, default=60.0,
                    help="simulated seconds of arrival time per wall-clock second; 0 sends as "
                         "fast as possible (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="the demo's small stream (--quick)")
    ap.add_argument("--seed", type=int, default=Config.seed)
    ap.add_argument("--malformed", type=int, default=6, help="malformed messages to mix in")
    ap.add_argument("--from-index", type=int, default=0,
                    help="send messages from this index of the sequence (resume a replay)")
    ap.add_argument("--count", type=int, help="send at most this many messages")
    return ap.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> dict:
    args = parse_args(argv)
    if args.speedup < 0 or args.partitions < 1 or args.from_index < 0:
        raise SystemExit("--speedup must be >= 0, --partitions >= 1, --from-index >= 0")
    cfg = Config.quick(seed=args.seed) if args.quick else Config(seed=args.seed)
    msgs = messages(cfg, args.malformed)
    end = len(msgs) if args.count is None else min(len(msgs), args.from_index + args.count)
    chosen = msgs[args.from_index:end]
    ensure_topic(args.bootstrap_servers, args.topic, args.partitions)
    print(f"Producing {len(chosen)} of {len(msgs)} messages "
          f"({sum(1 for m in chosen if m.malformed)} malformed) to {args.topic!r} at "
          f"{'full speed' if args.speedup == 0 else f'{args.speedup:g}x simulated time'}",
          flush=True)
    t = time.monotonic()
    per_partition = produce(args.bootstrap_servers, args.topic, chosen, args.speedup)
    print(f"Done in {time.monotonic() - t:.1f} s; messages per partition: "
          f"{dict(sorted(per_partition.items()))}", flush=True)
    return per_partition


if __name__ == "__main__":
    main()
