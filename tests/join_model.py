"""A pure-Python model of the per-key as-of join (docs/semantics.md, "As-of join"), micro-batch
by micro-batch, independent of the Scala operator: readings are held until the versions
stream's watermark passes them, then joined to the key's version valid at their time.

A reading is ``(key, t, payload)``, a version ``(key, t, payload)``; times are microseconds
(``None``: null); keys any hashable (``None``: null). The result is one ``Out`` per reading:
the batch it is emitted in, the reading, the version joined (or None) and the join status.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

Row = Tuple[Hashable, Optional[int], Any]


@dataclass(frozen=True)
class Out:
    batch: int
    reading: Row
    version: Optional[Row]
    status: str  # "joined", "no_version", "late", "invalid"


@dataclass
class _Key:
    max_reading: Optional[int] = None
    held: List[Row] = field(default_factory=list)
    # Versions sorted by time: parallel lists of times and rows.
    times: List[int] = field(default_factory=list)
    versions: List[Row] = field(default_factory=list)

    def readings_watermark(self, lateness: int) -> Optional[int]:
        return None if self.max_reading is None else self.max_reading - lateness

    def put(self, v: Row) -> None:
        i = bisect.bisect_left(self.times, v[1])
        if i < len(self.times) and self.times[i] == v[1]:
            self.versions[i] = v  # a correction replaces the version at the same time
        else:
            self.times.insert(i, v[1])
            self.versions.insert(i, v)

    def valid_at(self, t: int) -> Optional[Row]:
        i = bisect.bisect_right(self.times, t)
        return self.versions[i - 1] if i > 0 else None

    def prune(self, lateness: int) -> None:
        rwm = self.readings_watermark(lateness)
        if rwm is None:
            return  # no reading yet: every version is kept
        horizon = min([rwm] + [r[1] for r in self.held])
        i = bisect.bisect_right(self.times, horizon)  # versions[:i] are at or before the horizon
        if i > 1:
            del self.times[: i - 1]
            del self.versions[: i - 1]

    def state_rows(self) -> int:
        return len(self.held) + len(self.versions)


def versions_watermark_ms(max_version_ms: Optional[int], delay_ms: int) -> Optional[int]:
    """Spark's watermark on the versions side (ms): max version time minus the delay, undefined
    (None) until it is positive (Spark's watermark starts at 0)."""
    if max_version_ms is None or max_version_ms - delay_ms <= 0:
        return None
    return max_version_ms - delay_ms


@dataclass
class JoinResult:
    out: List[Out]
    held: Dict[Hashable, List[Row]]  # readings still held after the last batch
    state_rows: int  # held readings + versions in state after the last batch
    versions: Dict[Hashable, List[Row]]  # each key's versions in state after the last batch
    watermarks_ms: List[Optional[int]]  # the versions watermark of each batch


def run_join_model(
    batches: Sequence[Tuple[Sequence[Row], Sequence[Row]]],
    lateness: int,
    versions_delay: int,
    extra_batches: int = 1,
) -> JoinResult:
    """Runs micro-batches of (readings, versions); then ``extra_batches`` no-data batches (Spark
    runs one after its watermark advanced). ``lateness`` and ``versions_delay`` in micros."""
    keys: Dict[Hashable, _Key] = {}
    out: List[Out] = []
    max_version_ms: Optional[int] = None
    watermarks: List[Optional[int]] = []
    all_batches = list(batches) + [((), ())] * extra_batches
    for n, (readings, versions) in enumerate(all_batches):
        vwm_ms = versions_watermark_ms(max_version_ms, versions_delay // 1000)
        watermarks.append(vwm_ms)
        for v in versions:
            if v[0] is None or v[1] is None:
                continue  # cannot be placed: ignored
            keys.setdefault(v[0], _Key()).put(v)
            ms = v[1] // 1000
            max_version_ms = ms if max_version_ms is None else max(max_version_ms, ms)
        touched = {v[0] for v in versions if v[0] is not None and v[1] is not None}
        rwm_at_start = {k: s.readings_watermark(lateness) for k, s in keys.items()}
        for r in readings:
            if r[0] is None or r[1] is None:
                out.append(Out(n, r, None, "invalid"))
                continue
            s = keys.setdefault(r[0], _Key())
            touched.add(r[0])
            rwm = rwm_at_start.get(r[0])
            if rwm is not None and r[1] < rwm:
                out.append(Out(n, r, None, "late"))
            else:
                s.held.append(r)
            s.max_reading = r[1] if s.max_reading is None else max(s.max_reading, r[1])
        for k, s in keys.items():
            if vwm_ms is not None:
                keep: List[Row] = []
                for r in s.held:
                    if r[1] <= vwm_ms * 1000:
                        v = s.valid_at(r[1])
                        out.append(Out(n, r, v, "joined" if v is not None else "no_version"))
                        touched.add(k)  # the operator's timer (or rows) handled the key
                    else:
                        keep.append(r)
                s.held = keep
            # Pruned when the operator handles the key: rows, or its timer releasing readings
            # (pruning never changes what a reading is joined to: the horizon only advances).
            if k in touched:
                s.prune(lateness)
    return JoinResult(
        out=out,
        held={k: list(s.held) for k, s in keys.items() if s.held},
        state_rows=sum(s.state_rows() for s in keys.values()),
        versions={k: list(s.versions) for k, s in keys.items() if s.versions},
        watermarks_ms=watermarks,
    )
