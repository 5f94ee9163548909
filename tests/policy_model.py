"""Pure-Python reference model of the watermark policies of docs/semantics.md (no Spark).

Tumbling windows of size ``S``; rows are ``(key, t, value, lateness, source)`` (times in
micros; ``lateness`` is the row's per-key lateness or None for the default; ``source`` is
only read with ``sources``). Per key the *held* watermark never moves backward:

- at the start of batch N: ``wm_N(k) = max(held(k), floor_N)`` where ``floor_N`` is Spark's
  global watermark ``E_N`` (``closing='global'``) or ``E_N - max_skew - max(0, L(k) - L)``
  (``max_skew``, by default an hour; a key without state starts at the floor);
- a row is late when its window's end ``<= wm_N(k)``;
- at the end of the batch the policy proposes a value from the key's rows: ``M(k) - L(k)``
  (``L(k)`` fixed, per-key from the batch's rows, or adaptive: the nearest-rank ``quantile``
  of ``M - t`` over all the key's rows so far, with ``M`` the key's max at the end of the row's
  batch, clamped to [lo, hi]); with sources, the min over sources of ``M(k, s) - L(k)``, undefined
  until every expected source has reported. A proposal below ``wm_N(k)`` is held and counted;
- then every open window of every key with ``end <= wm(k)`` is emitted in batch N, and (with a
  floor) a key left without open windows leaves state;
- with ``closing='fleet'`` (``fleet``): no proposal from the key's rows; each key learns a *skew*
  ``s(k)`` and follows the *fleet floor* ``E - s(k)``. At the end of a batch with rows of k (once
  ``E_N`` is defined) that moved the key's max event time ``M(k)`` (or before its first skew):
  ``s(k) = min(max_skew, max(0, E_N - (M(k) - L), s_old - (E_N - ref) // FLEET_DECAY))``, with
  ``ref`` Spark's ``E`` when ``s_old`` was learnt, or ``s(k) = 0`` when the batch shows the key in
  step (``M(k) - L >= E_N``: the old skew is forgotten), then ``ref = E_N`` (a batch whose rows all lie
  at or below ``M(k)``, e.g. a retransmission, leaves ``s`` and ``ref``); the watermark is raised to
  ``min(E_N - s(k), M(k))`` (never past the key's max event time). A key without rows whose
  earliest open window's end is ``<= min(E_N - s(k), M(k))`` (its event-time timer) is raised to it too. The
  fleet floor is not applied at the start of a batch (only ``E_N - max_skew`` is), so rows are
  judged against the fleet floor of an earlier batch (Spark's batch of grace). A key without
  open windows leaves state once ``E_N - max_skew`` has reached its watermark (it returns at that
  floor, with no skew);
- with ``idle_timeout`` T (processing time; no skew floor then), after the batch's rows: a key
  whose last batch with rows is at least T before the batch's processing time ``P`` is idle:
  its open windows are emitted in batch N, its watermark is raised to their ends (so their
  rows are late from then on, and a proposal below it is an attempted regression), and it
  keeps only its record; it is forgotten (all state, its watermark undefined again) once it has
  been idle without windows for T more, or without rows for 2T.
- with ``arrival_ms`` (the arrival clock, ``idle_clock='arrival'``, the default): the same rule
  on the stream's arrival clock instead of processing time: ``P`` is then ``A_N``, the max
  arrival time (ms) over the rows of the batches before N (any row with an arrival time, valid
  or not; 0 before the first), a key's last arrival is the max arrival time of its rows and at
  least ``A_N`` (a null arrival counts as ``A_N``), and the rule decides at the start of the batch,
  before its rows (a key idle at ``A_N`` has its windows emitted even if it has rows in batch N,
  which are then late). One trailing no-data batch runs when ``A`` advanced in the last batch.
  With ``advance_when_idle`` (arrival clock): an idle key keeps its windows; its watermark gets
  the floor ``wm_a + (A_N - a(k) - T)`` while ``A_N - a(k) > T`` (``wm_a`` its watermark at the
  end of its last batch with rows), applied at the start of every batch (and, for a key without
  rows, by its timer: the same value); an idle key left without open windows is quiet from that
  batch's ``A_N`` on and forgotten, at the start of a batch, once quiet for T.
- with ``source_idle_timeout`` S (sources, arrival clock): a source's last arrival is the max
  arrival time of its rows (at least ``A_N``); at the end of a batch with rows of the key, a source
  whose last arrival *before the batch* is at least S before ``A_N`` is idle (a source first seen
  in the batch is not); the proposal is the min over the sources that are not idle (the max over
  all if all are). A key without rows gets the same proposal at ``A_N`` (its timer), raised to.

``E_N`` is Spark's: ``max over rows of batches < N of floor(t / 1000) ms - lateness``,
undefined in batch 0; one trailing no-data batch runs when ``E`` advanced in the last batch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from reference_model import DEFAULT_MAX_SKEW, spark_watermark_ms, valid_max_ms

PolicyRow = Tuple[Optional[Hashable], Optional[int], Any, Optional[int], Optional[str]]


@dataclass
class Policy:
    lateness: int
    column_lateness: bool = False  # per-row lateness (the rows' 4th field) instead of fixed
    adaptive: Optional[Tuple[float, int, int]] = None  # (quantile, lo, hi)
    sources: Optional[List[str]] = None  # expected sources ([]: the ones seen); None: off
    max_skew: Optional[int] = DEFAULT_MAX_SKEW  # None: unbounded (max_skew="unbounded")
    global_closing: bool = False
    idle_timeout: Optional[int] = None  # micros of processing time (then max_skew must be None)
    fleet: bool = False  # closing='fleet' (max_skew: the bound of the learnt skew, default an hour)
    # With idle_timeout on the arrival clock: an idle key's watermark follows the clock instead
    # of its windows being emitted (advance_when_idle=True).
    advance_when_idle: bool = False
    # Min of inputs (sources) on the arrival clock: micros after which a silent source stops
    # holding its key back (source_idle_timeout).
    source_idle_timeout: Optional[int] = None


# closing='fleet': a key's learnt skew falls by at most 1/FLEET_DECAY of the fleet's progress
# (Spark's global watermark) between two of its batches with rows that show it behind the fleet
# (a batch that shows it in step forgets the skew).
FLEET_DECAY = 16


@dataclass
class PolicyResult:
    # (key, start, end, batch, sorted values)
    emitted: List[Tuple[Hashable, int, int, int, Tuple[Any, ...]]] = field(default_factory=list)
    late: Dict[Tuple[int, Hashable], int] = field(default_factory=dict)
    # key -> the most attempted regressions it counted while in state (the count restarts when
    # a key returns after leaving state), and the number of (batch, key) with one
    regressions: Dict[Hashable, int] = field(default_factory=dict)
    regression_events: int = 0
    # (batch, key) -> (the key's count of attempted regressions, its watermark at the start of
    # the batch), for each batch in which the key's proposal was held back
    held: Dict[Tuple[int, Hashable], Tuple[int, int]] = field(default_factory=dict)
    released: List[Tuple[int, Hashable]] = field(default_factory=list)
    # per micro-batch, after it: keys in state, and (key, source) entries kept for min of inputs
    state_keys: List[int] = field(default_factory=list)
    state_sources: List[int] = field(default_factory=list)
    batches: int = 0  # micro-batches Spark runs (data batches plus a trailing no-data batch)
    open_rows: int = 0  # rows in windows still open at the end


def nearest_rank(values: Sequence[int], q: float) -> int:
    s = sorted(values)
    return s[max(1, math.ceil(q * len(s))) - 1]


def run_policy_model(batches: Sequence[Sequence[PolicyRow]], size: int, policy: Policy,
                     processing_ms: Optional[Sequence[int]] = None,
                     arrival_ms: Optional[Sequence[Sequence[Optional[int]]]] = None) -> PolicyResult:
    """``processing_ms``: each batch's processing time in milliseconds (with ``idle_timeout``
    on the wall clock; an empty batch is a no-data batch, in which only timers act).
    ``arrival_ms``: instead, each row's arrival time in milliseconds (or None), in the shape of
    ``batches``: idleness on the arrival clock."""
    res = PolicyResult()
    if policy.idle_timeout is not None:
        assert policy.max_skew is None and not policy.global_closing
        assert (processing_ms is None) != (arrival_ms is None)
    arrival_clock = 0  # A_N: the max arrival (ms) of the batches before N
    last_arrival: Dict[Hashable, int] = {}  # ms: the key's last batch with rows
    quiet_since: Dict[Hashable, int] = {}  # ms: since when the idle key has had no window
    held: Dict[Hashable, Optional[int]] = {}
    max_t: Dict[Hashable, int] = {}
    key_lateness: Dict[Hashable, int] = {}
    trails: Dict[Hashable, List[int]] = defaultdict(list)
    source_max: Dict[Hashable, Dict[str, int]] = defaultdict(dict)
    counts: Dict[Hashable, int] = {}  # attempted regressions since the key has state
    open_windows: Dict[Tuple[Hashable, int], List[Any]] = {}
    known: set = set()  # keys with state
    skew = None if policy.global_closing else policy.max_skew
    uses_global = policy.global_closing or skew is not None
    global_max_ms: Optional[int] = None
    if policy.fleet:
        assert skew is not None and not policy.global_closing and policy.idle_timeout is None
        assert policy.adaptive is None and policy.sources is None and not policy.column_lateness
    fleet_skew: Dict[Hashable, int] = {}
    fleet_ref: Dict[Hashable, int] = {}  # Spark's E at the key's last batch with rows
    arrival_wm: Dict[Hashable, Optional[int]] = {}  # advance_when_idle: the watermark at the last arrival
    source_seen: Dict[Hashable, Dict[str, int]] = defaultdict(dict)  # (key, source) -> last arrival (ms)
    if policy.advance_when_idle:
        assert policy.idle_timeout is not None and arrival_ms is not None
    if policy.source_idle_timeout is not None:
        assert policy.sources is not None and arrival_ms is not None and policy.max_skew is None
    forget_also = (max_t, key_lateness, trails, source_max, counts, arrival_wm, source_seen)

    def idle_floor(key: Hashable) -> Optional[int]:
        """advance_when_idle on the arrival clock: the floor of a key idle at ``arrival_clock``."""
        if key not in last_arrival or arrival_wm.get(key) is None:
            return None
        idle_for = arrival_clock - last_arrival[key] - policy.idle_timeout // 1000
        return arrival_wm[key] + idle_for * 1000 if idle_for > 0 else None

    def source_proposal(key: Hashable, lateness: int, seen_before: Dict[str, int]) -> Optional[int]:
        """Min of inputs over the sources not idle at ``arrival_clock`` (the max if all are)."""
        if not all(x in source_max[key] for x in policy.sources):
            return None
        timeout = policy.source_idle_timeout // 1000
        marks = {src: v - lateness for src, v in source_max[key].items()}
        active = [m for src, m in marks.items() if src not in seen_before or arrival_clock - seen_before[src] < timeout]
        return min(active) if active else max(marks.values(), default=None)

    def floor_of(key: Hashable, e: Optional[int]) -> Optional[int]:
        if e is None:
            return None
        if policy.global_closing:
            return e
        extra = max(0, key_lateness.get(key, policy.lateness) - policy.lateness)
        return e - skew - extra

    def raise_to(key: Hashable, value: Optional[int]) -> None:
        if value is not None and (held.get(key) is None or value > held[key]):
            held[key] = value

    all_batches = list(batches)
    n = 0
    def more() -> bool:
        if n < len(all_batches):
            return True
        if n > len(all_batches):
            return False
        if uses_global:
            return _advanced(all_batches, policy)
        # The arrival clock: one no-data batch after a last batch that moved it.
        return arrival_ms is not None and bool(all_batches) and _clock(arrival_ms, n) > _clock(arrival_ms, n - 1)

    while more():
        batch = all_batches[n] if n < len(all_batches) else []
        if arrival_ms is not None:
            arrival_clock = _clock(arrival_ms, n)
        e = None
        if uses_global:
            e_ms = spark_watermark_ms(global_max_ms, policy.lateness)
            e = None if e_ms is None else e_ms * 1000
        keys_in_batch = {r[0] for r in batch if r[0] is not None and r[1] is not None}
        if policy.idle_timeout is not None and arrival_ms is not None and policy.advance_when_idle:
            # Forgotten at the start of the batch once quiet (idle, no open window) for the timeout.
            for key in sorted(known, key=repr):
                if key in quiet_since and arrival_clock - quiet_since[key] >= policy.idle_timeout // 1000:
                    known.discard(key)
                    for d in (held, last_arrival, quiet_since) + forget_also:
                        d.pop(key, None)
                    res.released.append((n, key))
        elif policy.idle_timeout is not None and arrival_ms is not None:
            # The arrival clock decides at the start of the batch, before its rows.
            _idle_keys(n, arrival_clock, policy.idle_timeout // 1000, size, known, held, last_arrival,
                       quiet_since, open_windows, res, forget=forget_also, asked=keys_in_batch)
        known |= keys_in_batch  # a key has state (its watermark record) from its first row on
        for key in known:
            raise_to(key, floor_of(key, e))
            if policy.advance_when_idle:
                raise_to(key, idle_floor(key))
        wm_start = dict(held)
        rows_by_key: Dict[Hashable, List[PolicyRow]] = defaultdict(list)
        for row in batch:
            key, t = row[0], row[1]
            if key is None or t is None:
                continue
            if uses_global:  # Spark's global watermark follows the valid rows only (docs/semantics.md)
                ms = t // 1000
                global_max_ms = ms if global_max_ms is None else max(global_max_ms, ms)
            rows_by_key[key].append(row)
            start = t - t % size
            w = wm_start.get(key)
            if w is not None and start + size <= w:
                res.late[(n, key)] = res.late.get((n, key), 0) + 1
            else:
                open_windows.setdefault((key, start), []).append(row[2])
        max_before = {k: max_t.get(k) for k in rows_by_key}
        for key, rows in rows_by_key.items():
            m = max(r[1] for r in rows)
            if key in max_t:
                m = max(m, max_t[key])
            max_t[key] = m
            if policy.global_closing or policy.fleet:
                proposal = None
            else:
                if policy.adaptive is not None:
                    q, lo, hi = policy.adaptive
                    trails[key].extend(m - r[1] for r in rows)
                    key_lateness[key] = min(hi, max(lo, nearest_rank(trails[key], q)))
                elif policy.column_lateness:
                    key_lateness[key] = max(policy.lateness if r[3] is None else r[3] for r in rows)
                else:
                    key_lateness[key] = policy.lateness
                lateness = key_lateness[key]
                if policy.sources is not None and policy.source_idle_timeout is not None:
                    seen_before = dict(source_seen[key])
                    for r, a in zip(batch, arrival_ms[n]):
                        if r[0] != key or r[1] is None:
                            continue
                        s = source_max[key]
                        s[r[4]] = max(s.get(r[4], r[1]), r[1])
                        heard = arrival_clock if a is None else max(arrival_clock, a)
                        source_seen[key][r[4]] = max(source_seen[key].get(r[4], heard), heard)
                    proposal = source_proposal(key, lateness, seen_before)
                elif policy.sources is not None:
                    for r in rows:
                        s = source_max[key]
                        s[r[4]] = max(s.get(r[4], r[1]), r[1])
                    if all(x in source_max[key] for x in policy.sources):
                        proposal = min(v - lateness for v in source_max[key].values())
                    else:
                        proposal = None
                else:
                    proposal = m - lateness
            if proposal is not None and wm_start.get(key) is not None and proposal < wm_start[key]:
                counts[key] = counts.get(key, 0) + 1
                res.regressions[key] = max(res.regressions.get(key, 0), counts[key])
                res.regression_events += 1
                res.held[(n, key)] = (counts[key], wm_start[key])
            raise_to(key, proposal)
            raise_to(key, floor_of(key, e))  # with the key's lateness of this batch
            if policy.fleet and e is not None:
                # Learnt only from a batch that moved the key's max event time (or the key's first
                # learning): a retransmitted old row does not move M(k), so it moves no skew.
                if key not in fleet_skew or m > max_before[key]:
                    needed = e - (m - policy.lateness)  # how far the key's own watermark trails E
                    old = fleet_skew.get(key)
                    # In step (its own watermark at or above E): the old skew is forgotten.
                    decayed = 0 if old is None or needed <= 0 else old - (e - fleet_ref[key]) // FLEET_DECAY
                    fleet_skew[key] = min(skew, max(0, needed, decayed))
                    fleet_ref[key] = e
                raise_to(key, min(e - fleet_skew[key], max_t[key]))
            if processing_ms is not None:
                last_arrival[key] = processing_ms[n]
                quiet_since.pop(key, None)
            elif arrival_ms is not None:
                arrived = [arrival_clock if a is None else a
                           for r, a in zip(batch, arrival_ms[n]) if r[0] == key and r[1] is not None]
                # At least the clock as it stands: a row is never heard before the clock it is read at.
                last_arrival[key] = max(arrived + [arrival_clock] + ([last_arrival[key]] if key in last_arrival else []))
                quiet_since.pop(key, None)
                arrival_wm[key] = held.get(key)
        if policy.source_idle_timeout is not None:  # keys without rows: a source turning idle (timer)
            for key in sorted(known - set(rows_by_key), key=repr):
                raise_to(key, source_proposal(key, key_lateness.get(key, policy.lateness), source_seen[key]))
        if policy.fleet and e is not None:  # the event-time timers of keys without rows
            earliest: Dict[Hashable, int] = {}
            for k, start in open_windows:
                earliest[k] = min(earliest.get(k, start + size), start + size)
            for key, end in earliest.items():
                if key not in rows_by_key and key in fleet_skew and e - fleet_skew[key] >= end:
                    raise_to(key, min(e - fleet_skew[key], max_t[key]))
        for (key, start) in sorted(open_windows, key=repr):
            w = held.get(key)
            if w is not None and start + size <= w:
                res.emitted.append((key, start, start + size, n, tuple(sorted(open_windows[(key, start)]))))
                del open_windows[(key, start)]
        if policy.advance_when_idle:  # keys without rows (their timers): idle without windows: quiet
            with_windows = {k for k, _ in open_windows}
            for key in sorted(known - set(rows_by_key) - with_windows, key=repr):
                if key in last_arrival and key not in quiet_since and \
                        arrival_clock - last_arrival[key] >= policy.idle_timeout // 1000:
                    quiet_since[key] = arrival_clock
        if policy.idle_timeout is not None and processing_ms is not None:
            _idle_keys(n, processing_ms[n], policy.idle_timeout // 1000, size, known, held, last_arrival,
                       quiet_since, open_windows, res, forget=(max_t, key_lateness, trails, source_max, counts))
        if uses_global:
            # Keys left without open windows leave state (all of it: watermark, lateness, sketch,
            # sources, counts); a returning key starts at the floor.
            with_windows = {k for k, _ in open_windows}
            for key in sorted(known - with_windows, key=repr):
                if policy.fleet and (e is None or (held.get(key) is not None and held[key] > e - skew)):
                    continue  # kept (with its skew) until the floor it would return at reaches it
                known.discard(key)
                for d in (held, max_t, key_lateness, trails, source_max, counts, fleet_skew, fleet_ref):
                    d.pop(key, None)
                res.released.append((n, key))
        res.state_keys.append(len(known))
        res.state_sources.append(sum(len(source_max[k]) for k in known if k in source_max))
        n += 1
    res.batches = n
    res.open_rows = sum(len(v) for v in open_windows.values())
    return res


def _idle_keys(n, now, timeout, size, known, held, last_arrival, quiet_since, open_windows, res, forget,
               asked=frozenset()) -> None:
    """The idle_timeout timers of batch ``n`` at processing time ``now`` (ms), after its rows; on the
    arrival clock at the start of the batch, where the keys with rows in it (``asked``) are asked
    whether or not their timer is due (so one quiet for less than T but without rows for 2T is
    forgotten before its rows, as at its timer)."""
    for key in sorted(known, key=repr):
        if key not in last_arrival:
            continue
        due = quiet_since[key] + timeout if key in quiet_since else last_arrival[key] + timeout
        if due > now and (key not in asked or now - last_arrival[key] < timeout):
            continue
        windows = sorted(start for k, start in open_windows if k == key)
        for start in windows:
            res.emitted.append((key, start, start + size, n, tuple(sorted(open_windows.pop((key, start))))))
            if held.get(key) is None or start + size > held[key]:
                held[key] = start + size
        if (key in quiet_since and now - quiet_since[key] >= timeout) or now - last_arrival[key] >= 2 * timeout:
            known.discard(key)
            for d in (held, last_arrival, quiet_since) + forget:
                d.pop(key, None)
            res.released.append((n, key))
        else:
            quiet_since.setdefault(key, now)


def _clock(arrival_ms: Sequence[Sequence[Optional[int]]], n: int) -> int:
    """The arrival clock of batch ``n``: the max arrival time of the batches before it (0: none)."""
    return max((a for batch in arrival_ms[:n] for a in batch if a is not None), default=0)


def _advanced(batches: Sequence[Sequence[PolicyRow]], policy: Policy) -> bool:
    """Whether Spark's global watermark moved with the last batch (then a no-data batch runs)."""
    before, after = (spark_watermark_ms(valid_max_ms(bs), policy.lateness) for bs in (batches[:-1], batches))
    return after is not None and (before is None or after > before)
