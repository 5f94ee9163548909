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

``--constraint-propagation`` instead measures what Spark's constraint propagation costs each
plan (PruneFilters, InferFiltersFromConstraints: every filter asks its child for its
constraints in every micro-batch): per round, each method with
``spark.sql.constraintPropagation.enabled`` on and off, in alternating order; prints the
optimizer's medians over the rounds after ``--skip`` (the JIT's warm-up).

    .venv/bin/python benchmarks/plan_time.py --constraint-propagation --rounds 8
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
    p.add_argument("--constraint-propagation", action="store_true",
                   help="the optimizer with constraint propagation on against off, per method")
    p.add_argument("--skip", type=int, default=2, help="with --constraint-propagation: rounds left out")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.constraint_propagation and not 0 <= args.skip < args.rounds:
        p.error(f"--skip must be at least 0 and below --rounds ({args.rounds}), got {args.skip}")
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
    if args.constraint_propagation:
        constraint_propagation(spark, plans, args.rounds, args.skip)
    else:
        native_against_keyed(spark, plans, args.rounds)
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)
    return 0


def native_against_keyed(spark, plans, rounds: int) -> None:
    """The optimizer's and planner's time per method, the methods taking turns, and the rules."""
    times = {m: [] for m in METHODS}
    for r in range(rounds):
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


def constraint_propagation(spark, plans, rounds: int, skip: int) -> None:
    """The optimizer's time per method with spark.sql.constraintPropagation.enabled on and off."""
    key = "spark.sql.constraintPropagation.enabled"
    before = spark.conf.get(key)
    times = {(m, on): [] for m in METHODS for on in ("true", "false")}
    try:
        for r in range(rounds):
            for on in (("true", "false") if r % 2 == 0 else ("false", "true")):
                spark.conf.set(key, on)
                for m in METHODS:
                    t = planning_times(spark, plans[m])["optimize_ms"]
                    if r >= skip:
                        times[(m, on)].append(t)
            print(f"round {r + 1} of {rounds}" + (" (left out)" if r < skip else ""), flush=True)
    finally:
        spark.conf.set(key, before)
    for m in METHODS:
        on, off = (statistics.median(times[(m, v)]) for v in ("true", "false"))
        print(f"{m}: optimizer median {on:.2f} ms with constraint propagation, {off:.2f} ms without "
              f"({on - off:+.2f} ms); per round on: " + ", ".join(f"{x:.1f}" for x in times[(m, "true")])
              + "; off: " + ", ".join(f"{x:.1f}" for x in times[(m, "false")]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
