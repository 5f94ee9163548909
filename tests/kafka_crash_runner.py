"""Runs examples/kafka_to_delta.py with one crash point armed, for tests/test_kafka_delta.py.

    python tests/kafka_crash_runner.py --crash-at BATCH:PHASE --marker FILE -- <pipeline args>

When micro-batch BATCH reaches PHASE, the pipeline writes FILE and stops there (the thread or
task hangs) so that the test can ``kill -9`` the whole process group at that exact point:

- ``before-results``: the batch's offsets are logged, nothing of it is written yet;
- ``mid-results`` / ``mid-dead-letter``: that table's Delta write job is running: the task of
  partition 0 wrote its data file (if it had rows), the task of partition 1 hangs, so the
  table has data files but no commit for the batch;
- ``between-tables``: the results table committed the batch, the dead-letter table did not;
- ``after-both``: both tables committed the batch, Spark's commit log did not.

With ``--sink merge`` the results table's write is the pipeline's ``merge_delta`` (a Delta
MERGE), and the phases are the same around it: ``between-tables`` and ``after-both`` kill the
pipeline after the MERGE committed and before Spark's commit. (``mid-results`` still hangs the
MERGE's job, but in the scan of its source, before the MERGE writes a file: the barrier then
waits out its 10 s.)

The hang is injected around the pipeline's own ``write_delta`` and ``merge_delta`` (the only
functions replaced); everything else, Kafka, Spark and Delta included, is the real pipeline.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import kafka_to_delta  # noqa: E402

# Python workers (the mid-write barrier) run the same interpreter, with its pyarrow.
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

PHASES = ("before-results", "mid-results", "between-tables", "mid-dead-letter", "after-both")


def reached(marker: str, what: str) -> None:
    tmp = f"{marker}.tmp"
    with open(tmp, "w") as f:
        f.write(what)
    os.replace(tmp, marker)  # the test sees the marker whole or not at all


def hang() -> None:
    while True:  # until kill -9
        time.sleep(60)


def mid_write_barrier(marker: str, table: str, what: str):
    """An identity mapInArrow function: partition 0 passes its rows through; partition 1
    waits (at most 10 s) for partition 0's data file to appear, marks the crash point and
    hangs, so the write job never finishes."""

    def barrier(batches):
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1:
            started = time.time()
            while time.time() - started < 10 and not any(
                    p.stat().st_mtime >= started - 1 for p in Path(table).glob("*.parquet")):
                time.sleep(0.05)
            reached(marker, what)
            hang()
        yield from batches

    return barrier


def main() -> None:
    argv = sys.argv[1:]
    split = argv.index("--")
    ap = argparse.ArgumentParser()
    ap.add_argument("--crash-at", required=True, help="BATCH:PHASE")
    ap.add_argument("--marker", required=True)
    own = ap.parse_args(argv[:split])
    batch_s, phase = own.crash_at.split(":")
    crash_batch = int(batch_s)
    if phase not in PHASES:
        raise SystemExit(f"unknown phase {phase!r}; one of {PHASES}")
    pipeline_args = kafka_to_delta.parse_args(argv[split + 1:])

    def with_crash_point(write):
        def write_with_crash_point(df, path, app_id, batch_id):
            table = "results" if path == pipeline_args.results_table else "dead-letter"
            what = f"{batch_id}:{phase}"
            if batch_id == crash_batch:
                if phase == "before-results" and table == "results":
                    reached(own.marker, what)
                    hang()
                if phase == f"mid-{table}":
                    df = df.mapInArrow(mid_write_barrier(own.marker, path, what), df.schema)
            write(df, path, app_id, batch_id)
            if batch_id == crash_batch:
                if (phase, table) in (("between-tables", "results"), ("after-both", "dead-letter")):
                    reached(own.marker, what)
                    hang()

        return write_with_crash_point

    kafka_to_delta.write_delta = with_crash_point(kafka_to_delta.write_delta)
    kafka_to_delta.merge_delta = with_crash_point(kafka_to_delta.merge_delta)
    kafka_to_delta.main(argv[split + 1:])


if __name__ == "__main__":
    main()
