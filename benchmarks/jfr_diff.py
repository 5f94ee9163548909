"""Where one recording's extra CPU samples are, against another's (issue 28's bisection).

Reads the execution samples of two Java Flight Recorder files (``ab_checkouts.py --jfr`` or
``run_benchmarks.py --profile``) with the JDK's ``jfr`` tool and prints, for each pattern, how
many samples have a frame matching it anywhere in their stack, in A and in B, and B - A. A
sample is counted once per pattern, so the rows overlap (a pattern and one of its callers).

    PATH=$JAVA_HOME/bin:$PATH .venv/bin/python benchmarks/jfr_diff.py OLD.jfr NEW.jfr
    .venv/bin/python benchmarks/jfr_diff.py OLD.jfr NEW.jfr --pattern TimerState --callers TimerState
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from typing import List

# Components of a keyed micro-batch, by a class or package name in their frames.
PATTERNS = [
    "keyedwatermarks", "TransformWithState", "TimerState", "RocksDB", "StateStore", "EventTimeWatermark",
    "CollectMetricsExec", "AggregatingAccumulator", "CodeGenerator", "UnsafeProjection", "ObjectOutputStream",
    "ObjectInputStream", "ExpressionEncoder", "HashAggregate", "parquet", "ShuffleMapTask", "ResultTask",
    "QueryExecution", "Analyzer", "CurrentBatchTimestamp",
]
FRAME = re.compile(r"\s+([\w$.<>]+)\(.*line:")


def samples(path: str) -> List[List[str]]:
    """Each execution sample's stack, innermost frame first."""
    jfr = shutil.which("jfr")
    if jfr is None:
        raise SystemExit("jfr_diff: the JDK's jfr tool is not on PATH (PATH=$JAVA_HOME/bin:$PATH)")
    text = subprocess.run([jfr, "print", "--events", "jdk.ExecutionSample", "--stack-depth", "96", path],
                          check=True, capture_output=True, text=True).stdout
    out: List[List[str]] = []
    for line in text.splitlines():
        if line.startswith("jdk.ExecutionSample"):
            out.append([])
        elif out:
            m = FRAME.match(line)
            if m:
                out[-1].append(m.group(1))
    return out


def containing(stacks: List[List[str]], pattern: str) -> int:
    return sum(1 for s in stacks if any(pattern in f for f in s))


def callers(stacks: List[List[str]], pattern: str) -> collections.Counter:
    """The first frame outside the JDK and Scala's collections that calls into `pattern`."""
    skip = ("java.", "jdk.", "scala.", "sun.")
    c: collections.Counter = collections.Counter()
    for s in stacks:
        for i, f in enumerate(s):
            if pattern in f:
                j = i
                while j < len(s) and (s[j].startswith(skip) or pattern in s[j]):
                    j += 1
                c[s[j] if j < len(s) else "?"] += 1
                break
    return c


def main(argv) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", help="the older recording")
    p.add_argument("b", help="the newer recording")
    p.add_argument("--pattern", action="append", default=None, help="a frame pattern (default: a fixed list)")
    p.add_argument("--callers", default=None, metavar="PATTERN", help="also list who calls into PATTERN")
    args = p.parse_args(argv)
    a, b = samples(args.a), samples(args.b)
    print(f"| frames matching | A: {len(a)} samples | B: {len(b)} samples | B - A |")
    print("|---|---:|---:|---:|")
    for pat in args.pattern or PATTERNS:
        ca, cb = containing(a, pat), containing(b, pat)
        print(f"| `{pat}` | {ca} | {cb} | {cb - ca:+d} |")
    if args.callers:
        ca, cb = callers(a, args.callers), callers(b, args.callers)
        print(f"\ncallers of {args.callers} (A, B):")
        for k in sorted(set(ca) | set(cb), key=lambda k: -cb[k])[:10]:
            print(f"  {ca[k]:4d} {cb[k]:4d}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
