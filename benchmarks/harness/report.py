"""The markdown report of a throughput run (results table and ratios to ours)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Dict, List, Optional

from harness.timing import Run


@dataclass
class Result:
    config: str
    method: str
    total_rows: int
    warmup: Optional[Run]
    runs: List[Run]
    open_windows: Optional[int]
    emission: Optional[Dict[str, float]] = None

    @property
    def median(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)


def fmt_bytes(n: Optional[float]) -> str:
    if n is None:
        return "–"
    return f"{n / 2**20:,.1f}"


def _cpu(runs: List[Run]) -> str:
    cpu = [x.jvm_cpu_s for x in runs if x.jvm_cpu_s is not None]
    return f"{statistics.median(cpu):.1f}" if cpu else "–"


def _pair(e: Optional[Dict[str, float]], name: str, fmt: str) -> str:
    if not e or f"{name}_p50" not in e:
        return "–"
    return f"{format(e[name + '_p50'], fmt)} / {format(e[name + '_p95'], fmt)}"


def markdown(results: List[Result], header: List[str], notes: List[str]) -> str:
    lines = list(header)
    lines += [
        "| config | method | rows | batches | timed runs | warm-up s | median s | min–max s "
        "| rows/s | vs native | JVM CPU s | peak heap MiB | state rows | RocksDB mem MiB | state SST KiB "
        "| open (key, window) | SST B / open window | windows out "
        "| emit delay batches p50 / p95 | emit delay ms p50 / p95 | closing batch → out ms p50 / p95 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|---:|---:|---:|",
    ]
    native = {r.config: r.median for r in results if r.method == "native"}
    for r in results:
        last = r.runs[-1]
        walls = [x.wall_s for x in r.runs]
        ratio = native.get(r.config)
        ratio_s = f"{ratio / r.median:.2f}x" if ratio else "–"
        sst = last.state_custom.get("rocksdbSstFileSize")
        sst_s = f"{sst / 1024:,.0f}" if sst else "–"
        per_window = f"{sst / r.open_windows:,.1f}" if sst and r.open_windows else "–"
        lines.append(
            f"| {r.config} | {r.method} | {r.total_rows:,} | {last.batches} | {len(r.runs)} "
            f"| {r.warmup.wall_s:.2f} | {r.median:.2f} | {min(walls):.2f}–{max(walls):.2f} "
            f"| {r.total_rows / r.median:,.0f} | {ratio_s} | {_cpu(r.runs)} "
            f"| {max(x.peak_heap_bytes for x in r.runs) / 2**20:,.0f} "
            f"| {last.state_rows if last.state_rows is not None else '–'} "
            f"| {fmt_bytes(last.state_memory_bytes)} | {sst_s} "
            f"| {r.open_windows if r.open_windows is not None else '–'} | {per_window} "
            f"| {last.output_rows if last.output_rows is not None else '–'} "
            f"| {_pair(r.emission, 'batches', '.0f')} | {_pair(r.emission, 'ms', ',.0f')} "
            f"| {_pair(r.emission, 'close_to_out_ms', ',.0f')} |"
            if r.warmup else "")
    lines += ratio_table(results)
    lines += phase_table(results)
    lines.append("")
    lines += notes
    return "\n".join(lines) + "\n"


def ratio_table(results: List[Result]) -> List[str]:
    """Ours (keyed) against each other method of the same configuration, from this run's medians
    (the issue's targets): *vs X* = X's median / ours (higher: ours faster; vs the stateless
    limit at most about 1), and ours' run-to-run spread, (max - min) / median."""
    by = {(r.config, r.method): r for r in results if r.warmup}
    configs = list(dict.fromkeys(r.config for r in results))
    others = [m for m in ("native", "stateless", "tws_floor", "python", "python_tws")
              if any((c, m) in by for c in configs)]
    if not any((c, "keyed") in by for c in configs) or not others:
        return []
    lines = ["", "Ours (keyed) against the others, this run's medians (X's median / ours; the "
             "stateless limit reads and partially aggregates the same rows with no state; the "
             "tws_floor is the least a JVM transformWithState does per key, so vs tws_floor = "
             "ours / floor in throughput):", "",
             "| config | " + " | ".join(f"vs {m}" for m in others) + " | ours: spread of timed runs |",
             "|---|" + "---:|" * (len(others) + 1)]
    for c in configs:
        k = by.get((c, "keyed"))
        if k is None:
            continue
        cells = [f"{by[(c, m)].median / k.median:.2f}" if (c, m) in by else "–" for m in others]
        walls = [x.wall_s for x in k.runs]
        lines.append(f"| {c} | " + " | ".join(cells) + f" | {(max(walls) - min(walls)) / k.median:.0%} |")
    return lines


PHASES = ("triggerExecution", "addBatch", "queryPlanning", "getBatch", "latestOffset", "walCommit",
          "commitOffsets")


def phase_table(results: List[Result]) -> List[str]:
    """Where a micro-batch's time goes: each phase of Spark's `durationMs`, the median over the
    micro-batches that read rows, then over the timed runs (ms)."""
    rows = [r for r in results if r.warmup and any(x.phase_ms for x in r.runs)]
    if not rows:
        return []
    lines = ["", "Per micro-batch that read rows, Spark's `durationMs` phases in ms (median over "
             "the batches, then over the timed runs; *other* = triggerExecution less the rest):", "",
             "| config | method | " + " | ".join(PHASES) + " | other |",
             "|---|---|" + "---:|" * (len(PHASES) + 1)]
    for r in rows:
        med = {k: statistics.median(x.phase_ms.get(k, 0.0) for x in r.runs) for k in PHASES}
        other = med["triggerExecution"] - sum(v for k, v in med.items() if k != "triggerExecution")
        lines.append(f"| {r.config} | {r.method} | " + " | ".join(f"{med[k]:,.0f}" for k in PHASES)
                     + f" | {other:,.0f} |")
    return lines
