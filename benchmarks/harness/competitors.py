"""The pure-Python competitors must emit what ours emits (checked before timing)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import List

from pyspark.sql import SparkSession

from harness.data import SCHEMA
from harness.methods import result_frame


def check_competitors(spark: SparkSession, input_dir: Path, work: Path,
                      competitors: List[str]) -> str:
    """Each pure-Python competitor must emit the same windows, with the same counts and averages,
    as ours (all windows closed by the end of the data, in memory sinks, AvailableNow)."""
    results = {}
    for method in ["keyed"] + competitors:
        ev = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
        name = f"kwcheck_{method}_{int(time.time() * 1000)}"
        q = (result_frame(method, ev).writeStream.format("memory").queryName(name)
             .outputMode("append")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="check-", dir=work))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"competitor check: {method} failed: {q.exception()}")
        rows = spark.sql(f"SELECT device, window.start AS s, n, avg_temp FROM {name}").collect()
        spark.catalog.dropTempView(name)
        results[method] = {(r.device, r.s): (r.n, r.avg_temp) for r in rows}
        if len(results[method]) != len(rows):
            raise AssertionError(f"competitor check: {method} emitted a window more than once")
    a = results["keyed"]
    if not a:
        raise AssertionError("competitor check: ours emitted no window (the data closes none?)")
    for method in competitors:
        b = results[method]
        if a.keys() != b.keys():
            raise AssertionError(
                f"competitor check: windows differ: {len(a)} ours vs {len(b)} {method}, "
                f"e.g. {sorted(a.keys() ^ b.keys())[:3]}")
        for k in a:
            (n1, v1), (n2, v2) = a[k], b[k]
            if n1 != n2 or abs(v1 - v2) > 1e-9 * max(1.0, abs(v1)):
                raise AssertionError(f"competitor check: {k}: ours {a[k]} vs {method} {b[k]}")
    return (f"the pure-Python competitor{'s' if len(competitors) > 1 else ''} "
            f"({', '.join(competitors)}) emitted the same {len(a)} windows "
            f"({sum(n for n, _ in a.values()):,} rows) with the same counts and averages as ours")
