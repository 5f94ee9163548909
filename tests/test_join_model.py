"""The as-of join's reference model (tests/join_model.py) against a brute-force oracle: when the
versions arrive in order (none at or before the versions watermark when read), every reading
that is not late is joined to the newest version of its key at or before its time over all
versions ever read; every reading comes out exactly once; nothing is released before the
versions watermark passes it; state stays within its horizon."""

from __future__ import annotations

from typing import List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from join_model import Row, run_join_model

pytestmark = pytest.mark.quick

S = 1_000_000


@st.composite
def join_stream(draw) -> Tuple[List[Tuple[List[Row], List[Row]]], int, int]:
    """Batches of (readings, versions) over 3 keys; versions per key at distinct times, in
    increasing time across batches (so none is late); readings at any time."""
    n = draw(st.integers(1, 6))
    lateness = draw(st.sampled_from([0, 2, 10])) * S
    delay = draw(st.sampled_from([0, 1, 5])) * S
    batches: List[Tuple[List[Row], List[Row]]] = []
    next_version = 1
    for _ in range(n):
        readings = [(draw(st.sampled_from(["a", "b", "c"])), draw(st.integers(1, 40)) * S, i)
                    for i in range(draw(st.integers(0, 5)))]
        versions: List[Row] = []
        for _ in range(draw(st.integers(0, 2))):
            next_version += draw(st.integers(1, 6))
            versions.append((draw(st.sampled_from(["a", "b", "c"])), next_version * S, f"v{next_version}"))
        batches.append((readings, versions))
    return batches, lateness, delay


def brute_force(key, t: int, all_versions: List[Row]) -> Optional[Row]:
    older = [v for v in all_versions if v[0] == key and v[1] <= t]
    return max(older, key=lambda v: v[1]) if older else None


@settings(max_examples=200, deadline=None)
@given(join_stream())
def test_model_joins_as_of_all_versions(case) -> None:
    batches, lateness, delay = case
    result = run_join_model(batches, lateness, delay)
    all_versions = [v for _, vs in batches for v in vs]
    readings = [r for rs, _ in batches for r in rs]
    emitted = [o.reading for o in result.out]
    held = [r for rs in result.held.values() for r in rs]
    assert sorted(map(repr, emitted + held)) == sorted(map(repr, readings))  # each exactly once
    for o in result.out:
        if o.status in ("joined", "no_version"):
            vwm = result.watermarks_ms[o.batch]
            assert vwm is not None and o.reading[1] <= vwm * 1000
            assert o.version == brute_force(o.reading[0], o.reading[1], all_versions)
            assert (o.status == "joined") == (o.version is not None)
        else:
            assert o.status == "late" and o.version is None
    if all_versions:  # the watermark passes every version's time less the delay: nothing held below it
        final = result.watermarks_ms[-1]
        assert final is not None or max(v[1] for v in all_versions) <= delay + 1000
        assert all(final is None or r[1] > final * 1000 for r in held)
    # Each key keeps at most its held readings, the versions after its horizon, plus one.
    assert result.state_rows <= len(held) + len(all_versions)


def test_slow_device_kept_and_pruned() -> None:
    """A device whose readings trail the other's by minutes is joined, not dropped; a device
    with a rarely changing version is released by the versions stream's progress; versions
    older than a key's horizon are pruned to the one valid at it."""
    batches = [
        ([("fast", 100 * S, 0)], [("fast", 90 * S, "f1"), ("slow", 10 * S, "s1")]),
        ([("fast", 200 * S, 1), ("slow", 20 * S, 2)], [("fast", 190 * S, "f2")]),
        ([("slow", 30 * S, 3)], [("fast", 300 * S, "f3")]),
    ]
    r = run_join_model(batches, lateness=5 * S, versions_delay=0)
    got = {o.reading[2]: (o.batch, o.version and o.version[2], o.status) for o in r.out}
    assert got == {0: (2, "f1", "joined"), 1: (3, "f2", "joined"), 2: (1, "s1", "joined"), 3: (2, "s1", "joined")}
    assert r.held == {}
    # Released once the versions watermark (max version time of earlier batches) passes them:
    # fast's 100 s in batch 2 (watermark 190 s), its 200 s in the no-data batch 3 (300 s).
    # fast: horizon 195 s keeps f2 (valid at it) and f3; slow: only s1.
    assert r.state_rows == 3
