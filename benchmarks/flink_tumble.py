#!/usr/bin/env python3
"""Apache Flink reference row: Flink SQL's event-time ``TUMBLE`` over the benchmark's files.

Runs in its own venv (``benchmarks/flink_setup`` makes ``build/flink-venv`` with PyFlink, which
ships Flink's JVM runtime, and fetches the Parquet format jars into ``build/flink/lib``); never
imported by the Spark harness, which starts it as a subprocess (``run_benchmarks.py
--with-flink``) on the same generated parquet files:

    build/flink-venv/bin/python benchmarks/flink_tumble.py --input DIR --runs 3

The query is what a Flink user writes for the same job: a bounded filesystem source with
``WATERMARK FOR ets AS ets - INTERVAL '5' SECOND`` (``ets``: ``ts`` in ms; one watermark per
source split, i.e. per file, not one per device), ``TUMBLE(..., INTERVAL '10' SECOND)``,
``COUNT(*)`` and ``AVG(temp)`` per device and window. At the end of bounded input Flink emits
the final watermark, so every window fires; rows behind the watermark are dropped silently by
the window operator. So the *accuracy* reported is rows counted in windows / input rows. The
filesystem source does not read the files in name (arrival) order, and a split read early that
holds later event times moves the watermark past rows of files read after it; ``--one-split``
concatenates the files in arrival order into one file first, so that the watermark is the
stream's global one (as with one Kafka partition).

Timed runs write into the ``blackhole`` sink (the counterpart of Spark's ``noop``); one more
untimed run collects the windows to count rows and windows. Prints one JSON object on stdout
(and into ``--json-out``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment

REPO = Path(__file__).resolve().parent.parent
LIB = REPO / "build" / "flink" / "lib"


def table_env(parallelism: int) -> TableEnvironment:
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = env.get_config()
    jars = sorted(LIB.glob("*.jar"))
    if not jars:
        raise SystemExit(f"no jars in {LIB}: run benchmarks/flink_setup first")
    conf.set("pipeline.jars", ";".join(j.resolve().as_uri() for j in jars))
    conf.set("parallelism.default", str(parallelism))
    conf.set("table.local-time-zone", "UTC")
    return env


def source_ddl(path: str, lateness_s: int) -> str:
    # The files' ts is Parquet INT64 TIMESTAMP(MICROS, UTC-adjusted): Flink's TIMESTAMP_LTZ(6).
    # A watermark's time column must have a precision of at most 3, so the event time is ts cut
    # to milliseconds (the same 10 s windows: their bounds are whole milliseconds).
    return f"""
        CREATE TEMPORARY TABLE events (
            device STRING,
            ts TIMESTAMP_LTZ(6),
            temp DOUBLE,
            ets AS CAST(ts AS TIMESTAMP_LTZ(3)),
            WATERMARK FOR ets AS ets - INTERVAL '{lateness_s}' SECOND
        ) WITH ('connector' = 'filesystem', 'path' = '{path}', 'format' = 'parquet')"""


def window_query(window_s: int) -> str:
    return f"""
        SELECT device, window_start, window_end, COUNT(*) AS n, AVG(temp) AS avg_temp
        FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ets), INTERVAL '{window_s}' SECOND))
        GROUP BY device, window_start, window_end"""


def concatenate(src: Path, dst: Path) -> str:
    """The files of `src`, in name order (the harness names them in arrival order), as one
    parquet file in `dst`; returns `dst`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted(src.glob("*.parquet"))
    pq.write_table(pa.concat_tables(pq.read_table(f) for f in files), dst / "all.parquet")
    return str(dst)


def timed_run(args: argparse.Namespace) -> float:
    env = table_env(args.parallelism)
    env.execute_sql(source_ddl(args.input, args.lateness))
    env.execute_sql("""
        CREATE TEMPORARY TABLE windows_out (
            device STRING, window_start TIMESTAMP(3), window_end TIMESTAMP(3), n BIGINT,
            avg_temp DOUBLE
        ) WITH ('connector' = 'blackhole')""")
    t0 = time.perf_counter()
    env.execute_sql("INSERT INTO windows_out " + window_query(args.window)).wait()
    return time.perf_counter() - t0


def accuracy_run(args: argparse.Namespace) -> dict:
    env = table_env(args.parallelism)
    env.execute_sql(source_ddl(args.input, args.lateness))
    windows = rows = 0
    with env.execute_sql(window_query(args.window)).collect() as results:
        for r in results:
            windows += 1
            rows += r[3]
    return {"windows": windows, "rows_in_windows": rows}


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help="directory of the generated parquet files")
    p.add_argument("--runs", type=int, default=3,
                   help="timed runs after one warm-up run (0: only the counting run)")
    p.add_argument("--parallelism", type=int, default=2, help="as Spark's local[2]")
    p.add_argument("--lateness", type=int, default=5, help="seconds")
    p.add_argument("--window", type=int, default=10, help="seconds")
    p.add_argument("--one-split", action="store_true",
                   help="first concatenate the files, in name (= arrival) order, into one parquet "
                        "file: one split read in arrival order, so the watermark is the global "
                        "one of the stream instead of depending on the order the source reads "
                        "the files in")
    p.add_argument("--json-out", default=None, help="also write the JSON result to this file "
                   "(Flink logs to stdout too)")
    args = p.parse_args(argv)
    args.input = str(Path(args.input).resolve())
    tmp = None
    if args.one_split:
        tmp = tempfile.mkdtemp(prefix="flink-one-split-")
        args.input = concatenate(Path(args.input), Path(tmp))
    out = {"flink": _flink_version(), "parallelism": args.parallelism}
    if args.runs > 0:
        warmup = timed_run(args)
        walls = [timed_run(args) for _ in range(args.runs)]
        out.update({"warmup_s": warmup, "runs_s": walls, "median_s": statistics.median(walls)})
    out.update(accuracy_run(args))
    out["one_split"] = args.one_split
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(out))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out))
    return 0


def _flink_version() -> str:
    from importlib.metadata import version

    return version("apache-flink")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
