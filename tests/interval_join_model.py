"""A pure-Python model of the keyed interval join (issue 43, part 2), micro-batch by micro-batch,
independent of any engine code: a right row joins a left row of the same key when
``l.t - before <= r.t <= l.t + after``; lateness is judged per key and per side against that
side's watermark (the key's max time on the side, less the lateness) as it stood at the start of
the batch; a held row leaves state once the other side's watermark of its key has passed every
time it could still join, and in ``left_outer`` a left row that never joined is emitted then.

A row is ``(key, t, payload)``; times are microseconds (``None``: null); keys any hashable
(``None``: null). The result lists one ``Out`` per invalid, late or unmatched row and per joined
pair, with the batch it is emitted in, and the rows still in state after the last batch. The join
has no timers: a key's state changes only in batches where the key has rows, so no no-data
batches are run after the input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

Row = Tuple[Hashable, Optional[int], Any]

HOWS = ("inner", "left_outer")


@dataclass(frozen=True)
class Out:
    batch: int
    left: Optional[Row]
    right: Optional[Row]
    status: str  # "joined", "unmatched", "late", "invalid"


@dataclass
class _Held:
    """A left row in state, and whether it ever joined (a row, not a set member: two identical
    rows are two rows, each with its own flag)."""

    row: Row
    joined: bool = False


@dataclass
class _Key:
    max_left: Optional[int] = None
    max_right: Optional[int] = None
    left: List[_Held] = field(default_factory=list)
    right: List[Row] = field(default_factory=list)

    def left_watermark(self, lateness: int) -> Optional[int]:
        return None if self.max_left is None else self.max_left - lateness

    def right_watermark(self, lateness: int) -> Optional[int]:
        return None if self.max_right is None else self.max_right - lateness


def matches(left: Row, right: Row, before: int, after: int) -> bool:
    """Same non-null key and ``l.t - before <= r.t <= l.t + after`` (both bounds inclusive)."""
    return (
        left[0] is not None
        and left[0] == right[0]
        and left[1] is not None
        and right[1] is not None
        and left[1] - before <= right[1] <= left[1] + after
    )


def _valid(row: Row) -> bool:
    return row[0] is not None and row[1] is not None


@dataclass
class IntervalResult:
    out: List[Out]
    held_left: Dict[Hashable, List[Row]]  # left rows still in state after the last batch
    held_right: Dict[Hashable, List[Row]]  # right rows still in state after the last batch
    state_rows: int  # held left rows + held right rows


def run_interval_model(
    batches: Sequence[Tuple[Sequence[Row], Sequence[Row]]],
    before: int,
    after: int,
    lateness: int,
    how: str = "inner",
) -> IntervalResult:
    """Runs micro-batches of (left rows, right rows). ``before``, ``after`` and ``lateness`` in
    micros, non-negative; ``how`` is ``"inner"`` or ``"left_outer"``."""
    if how not in HOWS:
        raise ValueError(f"how: expected one of {HOWS}, got {how!r}")
    for name, value in (("before", before), ("after", after), ("lateness", lateness)):
        if value < 0:
            raise ValueError(f"{name}: expected a non-negative number of micros, got {value}")
    keys: Dict[Hashable, _Key] = {}
    out: List[Out] = []
    for n, (lefts, rights) in enumerate(batches):
        # (a) Null key or time: cannot be placed, emitted at once.
        out.extend(Out(n, lf, None, "invalid") for lf in lefts if not _valid(lf))
        out.extend(Out(n, None, r, "invalid") for r in rights if not _valid(r))
        valid_left = [lf for lf in lefts if _valid(lf)]
        valid_right = [r for r in rights if _valid(r)]
        # (b) Late against the watermarks at the start of the batch, taken before any of the
        # batch's rows moves a max: rows of one batch never make each other late.
        wm_left = {k: s.left_watermark(lateness) for k, s in keys.items()}
        wm_right = {k: s.right_watermark(lateness) for k, s in keys.items()}
        new_left: Dict[Hashable, List[_Held]] = {}
        new_right: Dict[Hashable, List[Row]] = {}
        for lf in valid_left:
            wm = wm_left.get(lf[0])
            if wm is not None and lf[1] < wm:
                out.append(Out(n, lf, None, "late"))
            else:
                new_left.setdefault(lf[0], []).append(_Held(lf))
        for r in valid_right:
            wm = wm_right.get(r[0])
            if wm is not None and r[1] < wm:
                out.append(Out(n, None, r, "late"))
            else:
                new_right.setdefault(r[0], []).append(r)
        # (c) Each pair with at least one new row, once: new left x (held + new right), then held
        # left x new right (held x held pairs were emitted in an earlier batch).
        for k in list(new_left) + [k for k in new_right if k not in new_left]:
            s = keys.setdefault(k, _Key())
            nl, nr = new_left.get(k, []), new_right.get(k, [])
            for h in nl:
                for r in s.right + nr:
                    if matches(h.row, r, before, after):
                        h.joined = True
                        out.append(Out(n, h.row, r, "joined"))
            for h in s.left:
                for r in nr:
                    if matches(h.row, r, before, after):
                        h.joined = True
                        out.append(Out(n, h.row, r, "joined"))
            s.left.extend(nl)
            s.right.extend(nr)
        # (d) The max times move with every valid row of the batch, late ones included (a late
        # row still shows how far its key's side has got).
        touched = set()
        for lf in valid_left:
            s = keys.setdefault(lf[0], _Key())
            s.max_left = lf[1] if s.max_left is None else max(s.max_left, lf[1])
            touched.add(lf[0])
        for r in valid_right:
            s = keys.setdefault(r[0], _Key())
            s.max_right = r[1] if s.max_right is None else max(s.max_right, r[1])
            touched.add(r[0])
        # (e) Eviction, for keys with rows in this batch (a key's watermarks move only then, so
        # other keys have nothing newly evictable): a held row goes once no row of the other side
        # that could join it is on time any more.
        for k in touched:
            s = keys[k]
            wr, wl = s.right_watermark(lateness), s.left_watermark(lateness)
            if wr is not None:
                keep: List[_Held] = []
                for h in s.left:
                    if h.row[1] + after < wr:
                        if how == "left_outer" and not h.joined:
                            out.append(Out(n, h.row, None, "unmatched"))
                    else:
                        keep.append(h)
                s.left = keep
            if wl is not None:
                s.right = [r for r in s.right if not r[1] + before < wl]
    held_left = {k: [h.row for h in s.left] for k, s in keys.items() if s.left}
    held_right = {k: list(s.right) for k, s in keys.items() if s.right}
    return IntervalResult(
        out=out,
        held_left=held_left,
        held_right=held_right,
        state_rows=sum(map(len, held_left.values())) + sum(map(len, held_right.values())),
    )
