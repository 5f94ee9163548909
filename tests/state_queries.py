"""Queries whose state must survive upgrades (docs/semantics.md, "Upgrades"), their input, and
a runner that resumes them from checkpoints in one JVM.

Used by tests/test_spark_upgrades.py (a checkpoint written on one Spark line resumed on
another: the runner runs as a subprocess in that line's venv), by tests/test_state_fixtures.py
(checkpoints written by an earlier keyed-watermarks release, tests/fixtures/state/) and by
dev/write_state_fixtures.py, which writes those fixtures. Each query covers one kind of state:
tumbling, sliding and session windows, allowed lateness, adaptive lateness (its quantile
sketch), sources (the per-source map), a timer policy (max_skew: event-time timers) and
closing='fleet' (the learnt skew, fleet_skew); and the keyed interval join (not among the
release's fixtures: it is newer).

As a script (any line's venv, keyed_watermarks installed):
    python tests/state_queries.py JOBS.json
JOBS.json: a list of {"input": dir, "checkpoint": dir, "out": dir, "kinds": [...]}; each kind's
query runs with Trigger.AvailableNow from <checkpoint>/<kind> into <out>/<kind> (parquet). A
failure prints `FAILED <kind>: <error>` and the exit status is 1.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence

SECOND = 1_000_000
BASE = 1_704_067_200 * SECOND  # 2024-01-01T00:00:00Z
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
SCHEMA = "device STRING, ts TIMESTAMP, temp DOUBLE, gw STRING"
DEVICES = ("a", "b", "c")
ROWS_PER_FILE = 12


def make_files(n_files: int, seed: int = 30) -> List[List[tuple]]:
    """`n_files` micro-batches of (device, ts, temp, gateway) rows: three devices at different
    speeds, some rows out of order and some late, two gateways (sources)."""
    rng = random.Random(seed)
    speed = {"a": 2, "b": 3, "c": 5}
    clock = {d: BASE for d in DEVICES}
    files = []
    for _ in range(n_files):
        rows = []
        for _ in range(ROWS_PER_FILE):
            d = rng.choice(DEVICES)
            clock[d] += rng.randint(0, 2 * speed[d]) * SECOND
            t = clock[d] - (rng.randint(0, 15) * SECOND if rng.random() < 0.2 else 0)
            ts = EPOCH + datetime.timedelta(microseconds=t)
            rows.append((d, ts, float(rng.randint(0, 40)) / 2, rng.choice(("g1", "g2"))))
        files.append(rows)
    return files


def write_files(spark, files: Sequence[Sequence[tuple]], input_dir: Path, first: int = 0) -> None:
    """Writes each batch as one parquet file, in order (the file source orders by mtime)."""
    input_dir.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(files, start=first):
        tmp = input_dir.parent / f"_tmp-{input_dir.name}-{i}"
        spark.createDataFrame(list(rows), SCHEMA).coalesce(1).write.parquet(str(tmp))
        (part,) = [p for p in tmp.iterdir() if p.name.endswith(".parquet")]
        target = input_dir / f"batch-{i:05d}.parquet"
        shutil.move(str(part), target)
        shutil.rmtree(tmp)
        os.utime(target, (1_000_000 + i, 1_000_000 + i))


def _aggs():
    from pyspark.sql import functions as F

    return [F.count("*").alias("n"), F.sum("temp").alias("s"), F.max("temp").alias("hi")]


def _keyed(events, **options):
    import keyed_watermarks as kw

    return kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds", **options)


def _queries() -> Dict[str, Callable]:
    import keyed_watermarks as kw

    return {
        "tumbling": lambda e: _keyed(e).window("10 seconds").agg_with_report(*_aggs()),
        "sliding": lambda e: _keyed(e).window("10 seconds", "5 seconds").agg_with_report(*_aggs()),
        "session": lambda e: _keyed(e).session("4 seconds").agg_with_report(*_aggs()),
        "allowed_lateness": lambda e: _keyed(e).window("10 seconds", allowed_lateness="10 seconds")
        .agg_with_report(*_aggs()),
        "adaptive_lateness": lambda e: _keyed(
            e, adaptive_lateness=kw.AdaptiveLateness(0.9, min="1 second", max="20 seconds"))
        .window("10 seconds").agg_with_report(*_aggs()),
        "sources": lambda e: _keyed(e, source="gw", sources=["g1", "g2"]).window("10 seconds")
        .agg_with_report(*_aggs()),
        "timers": lambda e: _keyed(e, max_skew="8 seconds").window("10 seconds").agg_with_report(*_aggs()),
        "fleet": lambda e: _keyed(e, closing="fleet", max_skew="20 seconds").window("10 seconds")
        .agg_with_report(*_aggs()),
        # The keyed interval join (its rows kept per key and side, and each side's max time):
        # gateway g1's rows joined to g2's of the same device within 5 s.
        "interval_join": lambda e: kw.interval_join(
            e.where("gw = 'g1'"), e.where("gw = 'g2'").selectExpr("device", "ts AS ts2", "temp AS temp2"),
            key="device", left_time="ts", right_time="ts2", before="5 seconds", after="5 seconds",
            lateness="5 seconds", how="left_outer"),
        # The as-of join (held readings, versions, each key's max reading time, timers): g1's rows
        # joined to versions from g2's, a device's configuration changing with every file. The
        # versions' times follow the files (30 s per file), so no version is ever behind the
        # versions watermark: a reading's version is then the same whichever batch released it
        # (a restart adds a no-data batch that releases readings early).
        "as_of_join": lambda e: kw.as_of_join(
            e.where("gw = 'g1'").select("device", "ts", "temp"), _versions(e.where("gw = 'g2'")),
            key="device", reading_time="ts", version_time="valid_from", lateness="5 seconds"),
    }


def _versions(e):
    """Versions of each device's configuration from the rows of file i: valid from BASE + 30 s * i,
    firmware i (the files' modification times are 1,000,000 s + i)."""
    from pyspark.sql import functions as F

    i = F.unix_seconds(F.col("_metadata.file_modification_time")) - 1_000_000
    return e.select("device", F.timestamp_micros(F.lit(BASE) + i * 30 * SECOND).alias("valid_from"),
                    i.cast("int").alias("firmware"))


KINDS = ("tumbling", "sliding", "session", "allowed_lateness", "adaptive_lateness", "sources", "timers", "fleet")


def query(spark, kind: str, input_dir: Path):
    events = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
    return _queries()[kind](events)


def run(spark, kind: str, input_dir: Path, checkpoint: Path, out: Path) -> None:
    """Runs `kind` over the input not yet processed by `checkpoint`; raises its error."""
    q = (query(spark, kind, input_dir).writeStream.format("parquet").outputMode("append")
         .option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise q.exception()


# The SQL settings every run of these queries uses (the same on every line: what a checkpoint
# fixes, e.g. 2 shuffle partitions, must not differ between writer and reader).
SQL_SETTINGS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
}
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def session(changelog: str = "false"):
    """The session every run of these queries uses in a process of its own."""
    from pyspark.sql import SparkSession

    import keyed_watermarks as kw

    builder = (SparkSession.builder.master("local[2]").appName("keyed-watermarks-state-queries")
               .config("spark.default.parallelism", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config(CHANGELOG, changelog))
    for key, value in SQL_SETTINGS.items():
        builder = builder.config(key, value)
    s = kw.configure(builder).getOrCreate()
    s.sparkContext.setLogLevel("ERROR")
    return s


@contextlib.contextmanager
def runner_settings(spark, changelog: str = "false"):
    """`session`'s SQL settings on an existing session (local[2] too) while the block runs, then
    the session's own again: the runner's queries in a test's session, as if in its process."""
    assert spark.sparkContext.master == "local[2]", spark.sparkContext.master
    wanted = {**SQL_SETTINGS, CHANGELOG: changelog}
    before = {key: spark.conf.get(key, None) for key in wanted}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def window_rows(spark, out: Path):
    """The window rows a run wrote, as sorted tuples (device, start us, end us, n, s, hi,
    revision when there is one); a join's rows, as sorted tuples of all their columns."""
    from pyspark.sql import functions as F

    if not out.exists():
        return []
    # The part files themselves, not the sink's log: a sink that started at a later batch (a
    # restored checkpoint) has a log Spark's reader refuses (no entry 0).
    df = spark.read.parquet(str(out / "part-*"))
    if "join_status" in df.columns:
        return sorted((tuple(r) for r in df.collect()), key=repr)
    df = df.where("kw_kind = 'window'")
    w = "session_window" if "session_window" in df.columns else "window"
    cols = ["device", F.unix_micros(f"{w}.start"), F.unix_micros(f"{w}.end"), "n", "s", "hi"]
    if "revision" in df.columns:
        cols.append("revision")
    return sorted(tuple(r) for r in df.select(*cols).collect())


def main(jobs_file: str) -> int:
    spark = session()
    failed = 0
    for job in json.loads(Path(jobs_file).read_text()):
        for kind in job["kinds"]:
            try:
                run(spark, kind, Path(job["input"]), Path(job["checkpoint"]) / kind, Path(job["out"]) / kind)
            except Exception as e:  # reported to the test, which decides
                failed += 1
                print(f"FAILED {job['checkpoint']} {kind}: {type(e).__name__}: {e}", flush=True)
    spark.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
