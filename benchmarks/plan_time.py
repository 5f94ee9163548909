"""Spark's optimizer and planner on one micro-batch's plan with input, native against keyed (issue 42).

A streaming query's analyzed plan is optimized and planned again in every micro-batch (the
progress's ``queryPlanning``), so every node of ours costs in every micro-batch. This takes the
analyzed plan of a micro-batch with input of each method (issue 42's workload: ab_checkouts.py's
query over its first two files, ``trigger(once=True)``), then times Spark's optimizer and
planner on it in the same JVM, the methods taking turns: per round, the median of 50 runs of
each after 30 warm-up runs (``batch_phases.planning_times``). Prints each
round's times and ours over native's, and the optimizer's rules that took ours the most time
(Spark's ``RuleExecutor`` metering, the last round). Compare builds by running this in each
build's process, alternating (``PYTHONPATH=CHECKOUT/python``).

    .venv/bin/python benchmarks/plan_time.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_checkouts import SCHEMA, generate, workload_query  # noqa: E402
from batch_phases import METHODS, planning_times  # noqa: E402


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", type=int, default=4_000, help="rows per file")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    import keyed_watermarks as kw
    from harness.session import base_builder, start_session

    work = Path(tempfile.mkdtemp(prefix="kw-plan-time-"))
    generate(work / "data", 1_000, args.rows, 2, 5_000_000)
    spark = start_session(base_builder("2g", "plan-time"))
    plans = {}
    for method in METHODS:
        ev = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(work / "data"))
        q = (workload_query(kw, method, ev, {}).writeStream.format("noop").outputMode("append")
             .option("checkpointLocation", str(work / f"ckpt-{method}")).trigger(once=True).start())
        q.awaitTermination()
        plans[method] = q._jsq.streamingQuery().lastExecution().analyzed()
    times = {m: [] for m in METHODS}
    for r in range(args.rounds):
        for m in METHODS[r % 2:] + METHODS[:r % 2]:
            times[m].append(planning_times(spark, plans[m]))
        opt = {m: times[m][-1]["optimize_ms"] for m in METHODS}
        plan = {m: times[m][-1]["plan_ms"] for m in METHODS}
        print(f"round {r + 1}: optimizer native {opt['native']:.2f} ms, keyed {opt['keyed']:.2f} ms "
              f"({opt['keyed'] / opt['native']:.2f}x); planner native {plan['native']:.2f} ms, keyed "
              f"{plan['keyed']:.2f} ms ({plan['keyed'] / plan['native']:.2f}x)", flush=True)
    for m in METHODS:
        print(f"{m}: optimizer median {statistics.median(t['optimize_ms'] for t in times[m]):.2f} ms, rules "
              + ", ".join(f"{name} {ms:.2f}" for name, ms in times[m][-1]["rules_ms"]))
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
