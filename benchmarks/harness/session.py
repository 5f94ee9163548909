"""The benchmark SparkSession (the same for every method) and its teardown: base_builder holds
the session settings common to every benchmark (run_benchmarks.py's methods, joins.py), and
start_session starts one with the library; build_session is the harness' session on top of
them (its Python workers, --conf, extra jars, profiling)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from pyspark.sql import SparkSession

import keyed_watermarks as kw

HERE = Path(__file__).resolve().parent.parent


def base_builder(driver_memory: str, app_name: str = "keyed-watermarks-benchmarks",
                 recent_progress: int = 10_000) -> SparkSession.Builder:
    """The settings of every benchmark's session: local[2], 2 shuffle partitions, AQE off, no UI
    or console progress, UTC; `recent_progress` progress reports kept per query (a benchmark
    that reads them all after the query keeps enough for its micro-batches)."""
    return (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.numRecentProgressUpdates", str(recent_progress))
        .config("spark.ui.showConsoleProgress", "false")
    )


def start_session(builder: SparkSession.Builder, jar: Optional[str] = None) -> SparkSession:
    """Starts `builder`'s session with the library (kw.configure: its jar, planner extension and
    the RocksDB state store provider), logging errors only. `jar`: another build of the
    library's jar instead of the package's (an A/B of two builds)."""
    if jar:
        import keyed_watermarks._jvm as kwjvm
        kwjvm.jar_path = lambda: str(Path(jar).resolve())
    spark = kw.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def build_session(driver_memory: str, changelog: bool, profile: bool = False,
                  jar: Optional[str] = None, conf: Sequence[str] = (),
                  extra_jars: Sequence[str] = ()) -> SparkSession:
    """run_benchmarks.py's session: base_builder's, RocksDB changelog checkpointing on or off,
    the Python competitors' workers set up."""
    # Python workers (the competitor) must run this interpreter (pandas, numpy, pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # pyspark 4.3 warns about pandas >= 3 in every worker; keep the log readable.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    builder = base_builder(driver_memory).config(
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true" if changelog else "false")
    for kv in conf:  # --conf: A/B of a Spark setting, for every method alike
        key, eq, value = kv.partition("=")
        if not eq or not key.strip():
            raise SystemExit(f"--conf {kv!r}: expected KEY=VALUE, e.g. spark.sql.shuffle.partitions=4")
        builder = builder.config(key.strip(), value.strip())
    if extra_jars:  # kw.configure appends the library's jar to these
        builder = builder.config("spark.jars", ",".join(extra_jars))
    if profile:  # deep stacks: Spark's task stacks exceed JFR's default depth of 64
        builder = builder.config("spark.driver.extraJavaOptions",
                                 "-XX:FlightRecorderOptions:stackdepth=1024")
    spark = start_session(builder, jar)
    # The competitor's function is pickled by reference: ship its module to the Python workers.
    spark.sparkContext.addPyFile(str(HERE / "python_keyed.py"))
    # transformWithStateInPandas also unpickles the processor in a driver-side Python worker
    # (to read its state schemas), which does not see addPyFile's files: pickle it by value.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules["python_tws"])
    return spark


def close_session(spark: SparkSession, work: Path, keep_work: bool):
    """Stops the session (after reading the Java and Spark versions for the report) and removes
    the work directory unless the user chose it. Returns (Java version, Spark version)."""
    versions = (spark.sparkContext._jvm.System.getProperty("java.version"), spark.version)
    spark.stop()
    if not keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return versions


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
