"""The Apache Flink reference (--with-flink) and the delayed-devices accuracy comparison."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Dict, List, Optional

from pyspark.sql import SparkSession

HERE = Path(__file__).resolve().parent.parent
FLINK_PYTHON = HERE.parent / "build" / "flink-venv" / "bin" / "python"


def run_flink(input_dir: Path, runs: int, work: Path, name: str,
              extra: Optional[List[str]] = None) -> Dict[str, object]:
    """flink_tumble.py in its own venv (benchmarks/flink_setup) on the configuration's files:
    one warm-up and `runs` timed runs into Flink's blackhole sink (none if runs == 0), then one
    collecting run."""
    import subprocess

    out = work / f"flink-{name}.json"
    logf = work / f"flink-{name}.log"
    with open(logf, "w") as lf:
        proc = subprocess.run([str(FLINK_PYTHON), str(HERE / "flink_tumble.py"), "--input",
                               str(input_dir), "--runs", str(runs), "--json-out", str(out)]
                              + (extra or []), stdout=lf, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = logf.read_text().splitlines()[-30:]
        raise RuntimeError(f"flink_tumble.py failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return json.loads(out.read_text())


def delayed_devices_accuracy(spark: SparkSession, work: Path, quick: bool) -> Dict[str, object]:
    """Accuracy on the IoT demo's stream (examples/iot_demo.py: fast, slow and batch-uploading
    devices whose rows arrive minutes late, in order; 1-minute windows, 30 s lateness): the
    demo runs Spark's global watermark and ours on its files (its own metrics), then Flink's
    TUMBLE counts the rows of the same files in its windows."""
    sys.path.insert(0, str(HERE.parent / "examples"))
    import iot_demo

    demo_dir = work / "iot-demo"
    argv = ["--workdir", str(demo_dir), "--out", str(work / "iot-demo.png")]
    metrics = iot_demo.main(argv + (["--quick"] if quick else []), spark=spark)
    cfg = metrics["config"]
    window_s = metrics["window_s"]
    lateness_s = iot_demo._duration_s(cfg["lateness"])
    flink_args = ["--window", str(window_s), "--lateness", str(lateness_s)]
    flink = run_flink(demo_dir / "input", 0, work, "iot-demo", flink_args)
    flink_one = run_flink(demo_dir / "input", 0, work, "iot-demo-one-split",
                          flink_args + ["--one-split"])
    keyed, glob = metrics["methods"]["keyed"], metrics["methods"]["global"]
    return {"events": metrics["events"], "devices": metrics["devices"], "window_s": window_s,
            "lateness_s": lateness_s, "files": metrics["micro_batch_files"], "flink": flink, "flink_one_split": flink_one,
            "keyed_late_rows": keyed["late_rows_reported"],
            "keyed_pct_closed": keyed["pct_events_counted_closed"],
            "global_pct_closed": glob["pct_events_counted_closed"]}


def delayed_devices_markdown(acc: Optional[Dict[str, object]]) -> List[str]:
    if not acc:
        return []
    n = acc["events"]
    f, f1 = acc["flink"], acc["flink_one_split"]
    ours = n - acc["keyed_late_rows"]
    return [
        "", f"Accuracy on the delayed-devices stream (`--with-flink`; the IoT demo's data, "
        f"examples/iot_demo.py: {sum(acc['devices'].values())} devices "
        f"({', '.join(f'{v} {k}' for k, v in acc['devices'].items())}), {n:,} events in {acc['files']} files, "
        f"batch uploaders' rows minutes late; {acc['window_s']} s windows, {acc['lateness_s']} s "
        "lateness): *Flink rows in windows* = rows Flink counted in its windows (every window "
        "fires at the end of the bounded input) / input rows, reading the files as they are "
        "(one split per file, in the source's order, not the arrival order) and as one file "
        "concatenated in arrival order (`--one-split`: the stream's global watermark); *ours aggregated* = input rows - our "
        "`late_rows` metric; *in the windows ours closed* = the demo's own measure (rows counted "
        "in the windows ours emitted, over the true rows of those windows) for Spark's global "
        "watermark and ours.", "",
        "| events | Flink rows in windows, split per file | Flink, one split | ours aggregated "
        "| Spark global, in the windows ours closed | ours, in the windows ours closed |",
        "|---:|---:|---:|---:|---:|---:|",
        f"| {n:,} | {f['rows_in_windows']:,} ({f['rows_in_windows'] / n:.2%}) "
        f"| {f1['rows_in_windows']:,} ({f1['rows_in_windows'] / n:.2%}) "
        f"| {ours:,} ({ours / n:.2%}) | {acc['global_pct_closed']:.2f}% "
        f"| {acc['keyed_pct_closed']:.2f}% |",
    ]


def flink_markdown(rows: List[Dict[str, object]], native: Dict[str, float]) -> List[str]:
    if not rows:
        return []
    lines = [
        "", "Apache Flink reference (`--with-flink`, benchmarks/flink_tumble.py): Flink SQL "
        "`TUMBLE(ets, 10 s)` with `WATERMARK FOR ets AS ets - INTERVAL '5' SECOND` over the same "
        "parquet files (bounded filesystem source, parallelism 2, blackhole sink), one "
        "watermark per source split (file), not per device; at the end of the bounded input "
        "every window fires, rows behind the watermark are dropped. *in windows* = rows counted "
        "in Flink's windows / input rows; *ours aggregated* = input rows - rows ours drops as "
        "late (checked against our `late_rows` metric) / input rows.", "",
        "| config | Flink | timed runs | warm-up s | median s | min–max s | rows/s | vs native "
        "| windows | in windows | ours aggregated |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        f = r["flink"]
        total = r["total_rows"]
        ratio = native.get(r["config"])
        ratio_s = f"{ratio / f['median_s']:.2f}x" if ratio else "–"
        lines.append(
            f"| {r['config']} | {f['flink']} | {len(f['runs_s'])} | {f['warmup_s']:.2f} "
            f"| {f['median_s']:.2f} | {min(f['runs_s']):.2f}–{max(f['runs_s']):.2f} "
            f"| {total / f['median_s']:,.0f} | {ratio_s} "
            f"| {f['windows']:,} | {f['rows_in_windows']:,} of {total:,} "
            f"({f['rows_in_windows'] / total:.2%}) "
            f"| {total - r['late_keyed']:,} ({(total - r['late_keyed']) / total:.2%}) |")
    return lines
