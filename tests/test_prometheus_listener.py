"""examples/prometheus_listener.py: what Prometheus scrapes equals the query's own progress.

A real keyed query (file source, four micro-batches with a null key and a late row) runs with
the listener; its /metrics page, scraped over HTTP and parsed by prometheus_client's parser, must
give for every number of ``kw.metrics``: the gauge = the last micro-batch's value
(``query.lastProgress``), the counter = the sum over the query's micro-batches
(``query.recentProgress``). The two paths are independent: Spark's listener bus feeding the
listener vs the progress the query keeps."""

from __future__ import annotations

import datetime as dt
import importlib.util
import math
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import functions as F

import keyed_watermarks as kw
from support import Replay

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "prometheus_listener.py"
T0 = dt.datetime(2026, 3, 2, 8, 0)


def _load_example():
    spec = importlib.util.spec_from_file_location("prometheus_listener", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


# Three devices; the last batch only has rows behind the fleet's maximum (so Spark's global
# watermark does not move and no no-data batch follows: the last progress has keys and lags).
BATCHES = [
    [("a", _at(1), 1.0), ("b", _at(2), 1.0), ("c", _at(1), 1.0), (None, _at(3), 1.0)],
    [("a", _at(25), 1.0), ("b", _at(14), 1.0), ("c", _at(4), 1.0)],
    [("a", _at(41), 1.0), ("a", _at(2), 1.0), ("b", _at(31), 1.0)],  # a@2 s: late for a
    [("b", _at(33), 1.0), ("c", _at(12), 1.0)],
]


def _scrape(url: str, query_id: str) -> dict:
    text = urllib.request.urlopen(url, timeout=30).read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("query_id") == query_id and not sample.name.endswith("_created"):
                values[sample.name] = sample.value
    return values


def _same(scraped: float, expected) -> bool:
    return math.isnan(scraped) if expected is None else scraped == expected


def test_scraped_metrics_equal_the_query_progress(spark, workdir):
    example = _load_example()
    listener, server, url = example.serve(spark, port=0)
    try:
        replay = Replay(spark, workdir)
        replay.add_all(BATCHES)
        per_device = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts",
                                         lateness="5 seconds", stuck_after="15 seconds")
                      .window("10 seconds").agg(F.count("*").alias("n")))
        query = (per_device.writeStream.queryName("prometheus_test").format("noop")
                 .outputMode("append").option("checkpointLocation", str(workdir / "chk"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        last = kw.metrics(query.lastProgress)
        listener.wait_for_batch(query.id, last["batch_id"])
        scraped = _scrape(url, str(query.id))
    finally:
        spark.streams.removeListener(listener)
        server.shutdown()

    by_batch = {p.batchId: kw.metrics(p) for p in query.recentProgress}
    assert sorted(by_batch) == list(range(last["batch_id"] + 1))  # every batch is there
    prefix = example.PREFIX
    expected = {}
    for name, value in last.items():
        if name in example.COUNTED:
            expected[f"{prefix}{name}_total"] = sum(m.get(name) or 0 for m in by_batch.values())
        else:
            expected[prefix + name] = value
    assert set(scraped) == set(expected)  # every number of kw.metrics, nothing else
    for name, value in expected.items():
        assert _same(scraped[name], value), (name, scraped[name], value)

    # The comparison is not vacuous: the stream has late and invalid rows, emitted windows,
    # and its last batch touched keys (lags and stuck keys defined).
    assert expected[prefix + "late_rows_total"] >= 1
    assert expected[prefix + "null_key_rows_total"] == 1
    assert expected[prefix + "input_rows_total"] == sum(len(b) for b in BATCHES)
    assert expected[prefix + "windows_emitted_total"] >= 1
    assert last["watermark_lag_max_s"] is not None and last["stuck_keys"] is not None
    assert last["state_rows"] == 3
