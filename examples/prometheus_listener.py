#!/usr/bin/env python
"""Per-batch metrics of keyed-watermark queries for Prometheus: a StreamingQueryListener.

``PrometheusListener`` turns each progress report's ``kw.metrics(progress)`` into Prometheus
metrics (``prometheus_client``), labelled by ``query_name`` and ``query_id``:

- counters (``<name>_total``, summed over micro-batches): rows read, invalid rows by reason,
  windows emitted, late rows, new and released keys, state rows removed;
- gauges (the last micro-batch's value): ``batch_id``, ``state_rows``, keys in the batch and
  with data, open windows, the watermark lag spread (``watermark_lag_{min,p50,p95,max}_s``,
  NaN when the batch touched no key) and ``stuck_keys``.

Every name starts with ``keyed_watermarks_`` (e.g. ``keyed_watermarks_late_rows_total``,
``keyed_watermarks_watermark_lag_p95_s``). ``start_http_server`` serves them in Prometheus
text format on 127.0.0.1 at ``/metrics``.

As a script it runs a small keyed query over Spark's ``rate`` source (20 devices, some of
them lagging) for ``--batches`` micro-batches and prints the URL to scrape:

    .venv/bin/python examples/prometheus_listener.py --port 9464 --batches 20
    curl -s http://127.0.0.1:9464/metrics | grep '^keyed_watermarks_'
"""

from __future__ import annotations

import argparse
import math
import threading
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from prometheus_client import (CollectorRegistry, Counter, Gauge, disable_created_metrics,
                               start_http_server)
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener

import keyed_watermarks as kw

PREFIX = "keyed_watermarks_"
LABELS = ("query_name", "query_id")
# Per-batch counts of things that happened: Prometheus counters (a sum over batches). Every
# other number of kw.metrics is a level after the batch: a gauge.
COUNTED = frozenset({
    "input_rows", "null_key_rows", "null_event_time_rows", "null_source_rows",
    "invalid_gap_rows", "invalid_lateness_rows", "future_event_time_rows",
    "windows_emitted", "late_rows", "keys_new", "keys_released", "state_rows_removed",
})
HELP = {
    "batch_id": "id of the last micro-batch reported",
    "state_rows": "rows in the keyed operator's state store after the batch",
    "keys_in_batch": "keys the last micro-batch handled (with rows or by a timer)",
    "keys_with_data": "keys with rows in the last micro-batch",
    "keys_with_held_watermark": "keys whose watermark policy proposed a regression, held",
    "open_windows": "open windows of the keys the last micro-batch handled",
    "stuck_keys": "keys trailing Spark's global watermark by more than stuck_after",
}


class PrometheusListener(StreamingQueryListener):
    """Exposes ``kw.metrics(event.progress)`` of every query as Prometheus metrics.

    A micro-batch is counted once per query id, however many progress reports name it (an idle
    query repeats its last batch; a restarted query continues its batch ids), so counters stay
    exact sums over the query's micro-batches. Queries without keyed-watermark metrics only
    get ``batch_id`` (and ``state_rows`` if they have a state operator of ours).
    """

    def __init__(self, registry: Optional[CollectorRegistry] = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._metrics: Dict[str, Any] = {}
        self._last_batch: Dict[str, int] = {}
        self._reported = threading.Condition()

    # -- StreamingQueryListener -------------------------------------------------------------

    def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's names)
        pass

    def onQueryProgress(self, event) -> None:  # noqa: N802
        progress = event.progress
        query_id = str(progress.id)
        values = kw.metrics(progress)
        batch_id = values["batch_id"]
        with self._reported:
            if batch_id <= self._last_batch.get(query_id, -1):
                return
            labels = {"query_name": progress.name or "", "query_id": query_id}
            for name, value in values.items():
                if isinstance(value, bool) or not (value is None or isinstance(value, (int, float))):
                    continue
                metric = self._metric(name)
                if name in COUNTED:
                    metric.labels(**labels).inc(value or 0)
                else:
                    metric.labels(**labels).set(math.nan if value is None else value)
            self._last_batch[query_id] = batch_id
            self._reported.notify_all()

    def onQueryIdle(self, event) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event) -> None:  # noqa: N802
        pass  # the last values stay exposed: a scrape after the end still sees them

    # -- helpers ----------------------------------------------------------------------------

    def _metric(self, name: str):
        if name not in self._metrics:
            if name in COUNTED:
                self._metrics[name] = Counter(
                    PREFIX + name, f"{name} per micro-batch, summed (kw.metrics)", LABELS,
                    registry=self.registry)
            else:
                self._metrics[name] = Gauge(
                    PREFIX + name, HELP.get(name, f"{name} of the last micro-batch (kw.metrics)"),
                    LABELS, registry=self.registry)
        return self._metrics[name]

    def last_batch(self, query_id: str) -> int:
        """The last micro-batch of the query the listener has handled (-1: none yet)."""
        with self._reported:
            return self._last_batch.get(str(query_id), -1)

    def wait_for_batch(self, query_id: str, batch_id: int, timeout_s: float = 60.0) -> None:
        """Blocks until the listener has handled ``batch_id`` of the query (Spark delivers
        progress events on its listener bus, after ``processAllAvailable`` returns)."""
        with self._reported:
            if not self._reported.wait_for(
                    lambda: self._last_batch.get(str(query_id), -1) >= batch_id, timeout_s):
                raise TimeoutError(f"no progress event for batch {batch_id} of query {query_id} "
                                   f"within {timeout_s} s")


def serve(spark: SparkSession, port: int = 9464, registry: Optional[CollectorRegistry] = None
          ) -> Tuple[PrometheusListener, Any, str]:
    """Registers a listener on the session and serves its metrics on 127.0.0.1:``port``
    (0: any free port); returns the listener, the HTTP server (``server.shutdown()`` stops it)
    and the URL to scrape."""
    listener = PrometheusListener(registry)
    server, _ = start_http_server(port, addr="127.0.0.1", registry=listener.registry)
    spark.streams.addListener(listener)
    return listener, server, f"http://127.0.0.1:{server.server_port}/metrics"


# ---------------------------------------------------------------------------------------------
# A small query to watch
# ---------------------------------------------------------------------------------------------


def rate_devices(spark: SparkSession, rows_per_second: int = 200):
    """20 devices from Spark's rate source; device i's event times lag i * 15 s behind arrival,
    so their watermarks spread out (and the laggards trail the fleet)."""
    device = F.col("value") % 20
    return (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
            .select(F.format_string("device-%02d", device).alias("device"),
                    (F.col("timestamp") - F.make_dt_interval(secs=device * 15)).alias("ts")))


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=9464, help="local port (0: any free one)")
    ap.add_argument("--batches", type=int, default=20, help="micro-batches to run")
    ap.add_argument("--trigger", default="2 seconds", help="processing-time trigger interval")
    ap.add_argument("--linger", type=float, default=0.0,
                    help="seconds to keep serving after the last batch (for a manual scrape)")
    args = ap.parse_args(argv)

    disable_created_metrics()  # no `<counter>_created` timestamps next to each counter
    spark = kw.configure(SparkSession.builder.master("local[2]")
                         .config("spark.sql.shuffle.partitions", "2")
                         .config("spark.ui.enabled", "false")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    listener, _, url = serve(spark, args.port)
    print(f"Prometheus metrics at {url}", flush=True)
    per_device = (kw.keyed_watermark(rate_devices(spark), key="device", event_time="ts",
                                     lateness="5 seconds", stuck_after="2 minutes")
                  .window("10 seconds").agg(F.count("*").alias("n")))
    query = (per_device.writeStream.queryName("prometheus_example").format("noop")
             .outputMode("append").trigger(processingTime=args.trigger).start())
    try:
        while listener.last_batch(query.id) < args.batches - 1:
            if query.awaitTermination(1):  # stopped or failed: say why below
                break
        if query.exception() is not None:
            raise RuntimeError(f"query failed: {query.exception()}")
        last = kw.metrics(query.lastProgress)
        if args.linger > 0:
            print(f"{args.batches} micro-batches done; serving {url} for {args.linger} s more",
                  flush=True)
            query.stop()
            time.sleep(args.linger)
    finally:
        query.stop()
        spark.stop()
    print(f"{args.batches} micro-batches done; metrics of the last: {last}")


if __name__ == "__main__":
    main()
