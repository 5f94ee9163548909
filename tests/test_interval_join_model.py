"""The keyed interval join's reference model (tests/interval_join_model.py) against a brute-force
oracle that replays no state: a row is invalid when its key or time is null and late when its
time is below its key's max time on its side over earlier batches less the lateness; the joined
pairs are exactly the matching pairs of on-time rows (by a nested loop over all rows), each
emitted once in the later of the two rows' batches; in ``left_outer`` an on-time left row with no
match comes out "unmatched" once, in the first batch at whose end the key's right watermark has
passed ``t + after``, or is still held; ``inner`` emits no "unmatched"; the rows left in state are
exactly the on-time rows the other side's final watermark has not passed."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Dict, Hashable, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interval_join_model import Row, run_interval_model

pytestmark = pytest.mark.quick

S = 1_000_000

Batches = List[Tuple[List[Row], List[Row]]]


@st.composite
def interval_stream(draw) -> Tuple[Batches, int, int, int, str]:
    """Batches of (left rows, right rows) over 3 keys, times 1..40 s in any order, now and then a
    null key or time; every row a distinct payload, so rows are told apart by it."""
    n = draw(st.integers(1, 6))
    before = draw(st.sampled_from([0, 3, 10])) * S
    after = draw(st.sampled_from([0, 3, 10])) * S
    lateness = draw(st.sampled_from([0, 2, 10])) * S
    how = draw(st.sampled_from(["inner", "left_outer"]))
    counter = itertools.count()

    def row(side: str) -> Row:
        # About one row in ten has a null key, one in ten a null time.
        key = draw(st.sampled_from(["a", "b", "c", "a", "b", "c", "a", "b", "c", None]))
        t = None if draw(st.integers(0, 9)) == 0 else draw(st.integers(1, 40)) * S
        return (key, t, f"{side}{next(counter)}")

    batches: Batches = []
    for _ in range(n):
        lefts = [row("L") for _ in range(draw(st.integers(0, 5)))]
        rights = [row("R") for _ in range(draw(st.integers(0, 5)))]
        batches.append((lefts, rights))
    return batches, before, after, lateness, how


def prefix_max(batches: Batches, side: int, key: Hashable, upto: int) -> Optional[int]:
    """The key's max time on the side over the valid rows of batches ``< upto`` (late rows too)."""
    times = [r[1] for b in batches[:upto] for r in b[side] if r[0] == key and r[0] is not None and r[1] is not None]
    return max(times) if times else None


def watermark(batches: Batches, side: int, key: Hashable, upto: int, lateness: int) -> Optional[int]:
    m = prefix_max(batches, side, key, upto)
    return None if m is None else m - lateness


def classify(batches: Batches, lateness: int) -> Dict[str, str]:
    """Each row's fate on arrival by payload: "invalid", "late" or "on_time"."""
    fate: Dict[str, str] = {}
    for n, b in enumerate(batches):
        for side in (0, 1):
            for r in b[side]:
                if r[0] is None or r[1] is None:
                    fate[r[2]] = "invalid"
                else:
                    wm = watermark(batches, side, r[0], n, lateness)
                    fate[r[2]] = "late" if wm is not None and r[1] < wm else "on_time"
    return fate


def brute_pairs(batches: Batches, fate: Dict[str, str], before: int, after: int) -> Counter:
    """(left payload, right payload, batch) of every matching pair of on-time rows, by a nested
    loop over all rows; the batch is the later of the two arrivals."""
    arrivals = [(n, r) for n, b in enumerate(batches) for r in b[0] if fate[r[2]] == "on_time"]
    rights = [(n, r) for n, b in enumerate(batches) for r in b[1] if fate[r[2]] == "on_time"]
    pairs: Counter = Counter()
    for nl, lf in arrivals:
        for nr, r in rights:
            if lf[0] == r[0] and lf[1] - before <= r[1] <= lf[1] + after:
                pairs[(lf[2], r[2], max(nl, nr))] += 1
    return pairs


@settings(max_examples=200, deadline=None)
@given(interval_stream())
def test_model_against_brute_force(case) -> None:
    batches, before, after, lateness, how = case
    result = run_interval_model(batches, before, after, lateness, how)
    fate = classify(batches, lateness)
    arrival = {r[2]: n for n, b in enumerate(batches) for side in (0, 1) for r in b[side]}
    lefts = {r[2]: r for b in batches for r in b[0]}
    rights = {r[2]: r for b in batches for r in b[1]}
    final_wm = {(side, k): watermark(batches, side, k, len(batches), lateness)
                for side in (0, 1) for k in ("a", "b", "c")}

    # Invalid and late: each such row once, in its arrival batch, the other side None; no other
    # row is ever invalid or late.
    for status in ("invalid", "late"):
        got = Counter()
        for o in [o for o in result.out if o.status == status]:
            assert (o.left is None) != (o.right is None)
            r = o.left if o.left is not None else o.right
            assert r == (lefts if o.left is not None else rights)[r[2]]  # on the side it came in
            assert o.batch == arrival[r[2]]
            got[r[2]] += 1
        assert got == Counter(p for p, f in fate.items() if f == status)

    # Joined: exactly the matching on-time pairs, each once, in the later arrival batch.
    joined = Counter((o.left[2], o.right[2], o.batch) for o in result.out if o.status == "joined")
    assert joined == brute_pairs(batches, fate, before, after)
    for o in result.out:
        if o.status == "joined":
            assert o.left == lefts[o.left[2]] and o.right == rights[o.right[2]]

    # Unmatched: only in left_outer, only for on-time left rows without a match, once, in the
    # first batch (from its arrival on) at whose end the key's right watermark passed t + after.
    unmatched = [o for o in result.out if o.status == "unmatched"]
    matched = {lf for lf, _, _ in joined}
    held_left = Counter(r[2] for rs in result.held_left.values() for r in rs)
    held_right = Counter(r[2] for rs in result.held_right.values() for r in rs)
    if how == "inner":
        assert unmatched == []
    else:
        assert all(o.right is None for o in unmatched)
        got = Counter(o.left[2] for o in unmatched)
        assert all(c == 1 for c in got.values())
        for p, lf in lefts.items():
            if fate[p] != "on_time" or p in matched:
                assert p not in got
                continue
            due = [n for n in range(arrival[p], len(batches))
                   if (wm := watermark(batches, 1, lf[0], n + 1, lateness)) is not None and lf[1] + after < wm]
            if due:
                assert [o.batch for o in unmatched if o.left[2] == p] == [due[0]]
                assert p not in held_left
            else:
                assert p not in got and held_left[p] == 1

    # State: exactly the on-time rows the other side's final watermark has not passed (the
    # watermarks only grow, so a row that leaves never had to stay); never a late or invalid row.
    def kept(side: int, r: Row, slack: int) -> bool:
        if fate[r[2]] != "on_time":
            return False
        wm = final_wm[(1 - side, r[0])]
        return not (wm is not None and r[1] + slack < wm)

    assert held_left == Counter(p for p, r in lefts.items() if kept(0, r, after))
    assert held_right == Counter(p for p, r in rights.items() if kept(1, r, before))
    for side, held in ((0, result.held_left), (1, result.held_right)):
        for k, rs in held.items():
            assert rs and all(r[0] == k and fate[r[2]] == "on_time" for r in rs)
    assert result.state_rows == sum(held_left.values()) + sum(held_right.values())


def test_delayed_device_joined_and_unmatched_on_time() -> None:
    """A device whose rows trail another's by minutes joins (one global watermark would have made
    its rows late); a late row joins nothing; a left row never matched comes out "unmatched" in
    the batch its key's right watermark passes t + after, not earlier."""
    batches: Batches = [
        ([("fast", 100 * S, "L0")], [("fast", 101 * S, "R0")]),
        ([("slow", 10 * S, "L1")], [("fast", 200 * S, "R1")]),
        ([("fast", 90 * S, "L2")], [("slow", 12 * S, "R2")]),
        ([("slow", 30 * S, "L3")], [("slow", 25 * S, "R3")]),
        ([(None, 50 * S, "L4")], [("slow", 40 * S, "R4")]),
    ]
    # before 2 s, after 3 s: r joins l when l.t - 2 s <= r.t <= l.t + 3 s; lateness 5 s.
    r = run_interval_model(batches, before=2 * S, after=3 * S, lateness=5 * S, how="left_outer")
    got = {(o.batch, o.left and o.left[2], o.right and o.right[2], o.status) for o in r.out}
    assert len(got) == len(r.out)
    assert got == {
        # 0: no watermark yet; 98 <= 101 <= 103. Then fast: wmL 95 s, wmR 96 s; nothing evicted.
        (0, "L0", "R0", "joined"),
        # 1: R1 (200 s) on time (>= 96 s) but outside L0's [98, 103]. Then fast wmR 195 s evicts
        #    L0 (103 < 195; it joined, so nothing comes out); slow wmL 5 s, L1 held (no wmR).
        # 2: fast's L2 at 90 s < wmL 95 s: late, kept nowhere. slow's R2 at 12 s is on time (slow
        #    has no right watermark; a global one, near 195 s, would have dropped it) and joins
        #    L1: 8 <= 12 <= 13. Then slow wmR 7 s: L1 stays (13 < 7 false).
        (2, "L2", None, "late"),
        (2, "L1", "R2", "joined"),
        # 3: L3 (30 s) and R3 (25 s) on time; no pair: L3 wants [28, 33], L1 [8, 13]. Then slow
        #    wmL 25 s, wmR 20 s: L1 goes (13 < 20; joined), R2 goes (14 < 25); L3 stays
        #    (33 < 20 false): not unmatched yet.
        # 4: the null-key left row is invalid. R4 (40 s) on time, outside [28, 33]. Then slow
        #    wmR 35 s: L3 goes (33 < 35), never joined: unmatched now.
        (4, "L4", None, "invalid"),
        (4, "L3", None, "unmatched"),
    }
    assert r.held_left == {}
    # fast wmL 95 s keeps R0 (103 < 95 false) and R1; slow wmL 25 s keeps R3 (27) and R4 (42).
    assert r.held_right == {"fast": [("fast", 101 * S, "R0"), ("fast", 200 * S, "R1")],
                            "slow": [("slow", 25 * S, "R3"), ("slow", 40 * S, "R4")]}
    assert r.state_rows == 4

    # The inner join: the same rows, the same state, no "unmatched".
    inner = run_interval_model(batches, before=2 * S, after=3 * S, lateness=5 * S)
    assert {(o.batch, o.left and o.left[2], o.right and o.right[2], o.status) for o in inner.out} \
        == got - {(4, "L3", None, "unmatched")}
    assert (inner.held_left, inner.held_right, inner.state_rows) == (r.held_left, r.held_right, 4)


def test_duplicates_same_batch_and_bad_how() -> None:
    """Two identical rows are two rows: each joins, each is held, each comes out unmatched; rows
    of one batch never make each other late; an unknown ``how`` is refused."""
    x, w = ("k", 10 * S, "x"), ("k", 35 * S, "w")
    batches: Batches = [
        # before = after = lateness = 0: r joins l only at l.t. Both copies of x join y.
        ([x, x], [("k", 10 * S, "y")]),
        # z (1 s) < wmL(k) 10 s: late. r25 is judged against wmR(k) at the start of the batch
        # (10 s), not against r30 before it: on time. Then wmR(k) 30 s evicts both copies of x
        # (10 < 30), silently: they joined.
        ([("k", 1 * S, "z")], [("k", 30 * S, "r30"), ("k", 25 * S, "r25")]),
        # 35 s >= wmL(k) 10 s: on time; no right row at 35 s. Then wmL(k) 35 s evicts y, r30 and
        # r25 (10, 30, 25 < 35); wmR(k) 30 s keeps both copies of w (35 < 30 false).
        ([w, w], []),
        # r40 on time (>= 30 s), not at 35 s. Then wmR(k) 40 s passes 35 s: both copies of w
        # unmatched; r40 stays (40 < 35 false).
        ([], [("k", 40 * S, "r40")]),
    ]
    r = run_interval_model(batches, before=0, after=0, lateness=0, how="left_outer")
    got = Counter((o.batch, o.left and o.left[2], o.right and o.right[2], o.status) for o in r.out)
    assert got == Counter({
        (0, "x", "y", "joined"): 2,
        (1, "z", None, "late"): 1,
        (3, "w", None, "unmatched"): 2,
    })
    assert r.held_left == {}
    assert r.held_right == {"k": [("k", 40 * S, "r40")]}
    assert r.state_rows == 1
    with pytest.raises(ValueError):
        run_interval_model(batches, 0, 0, 0, how="right_outer")
