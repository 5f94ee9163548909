"""Pure-Python reference model of docs/semantics.md (no Spark): the test oracle.

Input: micro-batches (lists of ``(key, event_time_micros, value)`` rows; key and time may be
None), lateness ``L``, window size ``S`` and optional slide in microseconds. Per key ``k``:

- ``wm(k) = max event time seen for k - L``, undefined before k's first row;
- a row of batch ``N`` goes into each of its windows whose end is ``> wm(k)`` at the *start*
  of batch N (or all of them while wm(k) is undefined); it is late when none is left; late
  rows are counted, not aggregated;
- at the *end* of batch N, ``wm(k)`` advances with all of k's rows of the batch, then every
  open window of k with ``end <= wm(k)`` is emitted (in batch N) and dropped;
- with ``max_skew`` no key's watermark trails Spark's global watermark by more than the skew,
  and a key left without open windows leaves state (see ``run_model``);
- with ``dedup`` rows carry a fourth element, their dedup values: a row whose values its key
  already had within the key's horizon is a copy, dropped and counted (see ``run_model``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

Row = Tuple[Optional[Hashable], Optional[int], Any]


@dataclass(frozen=True)
class Window:
    key: Hashable
    start: int
    end: int
    batch: int  # micro-batch in which the window is emitted
    watermark_at_start: Optional[int]  # wm(key) at the start of that batch (None: undefined)
    values: Tuple[Any, ...]  # the window's on-time values, in input order (a pane: see below)
    revision: int = 0  # 0 for the first firing, then one more per late firing (kw_pane_index)
    # With emit != "final" (docs/semantics.md, "Panes and accumulation"): "early", "on_time" or
    # "late"; `values` are the pane's (the window so far; with accumulation="discarding" the
    # rows since the window's previous pane). A retraction (accumulation="retracting") repeats
    # the previous pane's values, with the pane and index of the firing that replaces it.
    pane: Optional[str] = None
    retraction: bool = False


@dataclass
class ModelResult:
    emitted: List[Window] = field(default_factory=list)
    # (batch, key) -> number of late rows of the key in that batch
    late: Dict[Tuple[int, Hashable], int] = field(default_factory=dict)
    # (batch, key) -> wm(key) at the start of that batch, for the entries of `late`
    late_watermark: Dict[Tuple[int, Hashable], Optional[int]] = field(default_factory=dict)
    # the late rows themselves: (batch, key, event time, value)
    late_rows: List[Tuple[int, Hashable, int, Any]] = field(default_factory=list)
    invalid: int = 0  # rows with a null key or a null event time
    # windows still in state after the last batch: (key, start) -> on-time values
    open: Dict[Tuple[Hashable, int], List[Any]] = field(default_factory=dict)
    # (batch, key) of every key that left state at the end of that batch (max_skew)
    released: List[Tuple[int, Hashable]] = field(default_factory=list)
    # (batch, key) -> rows of the key dropped as copies in that batch (dedup)
    duplicates: Dict[Tuple[int, Hashable], int] = field(default_factory=dict)
    # (batch, key, attempted regressions so far, wm_N(key)) per batch whose proposal was held
    held: List[Tuple[int, Hashable, int, Optional[int]]] = field(default_factory=list)
    # per micro-batch, the keys it handled (rows, or windows closed by the floor: Spark's
    # event-time timers) and what became of them: docs/semantics.md, "Per-batch metrics"
    batch_keys: List["BatchKeys"] = field(default_factory=list)
    # after the last batch, per key in state: docs/semantics.md, "Per-key state"
    key_state: Dict[Hashable, "KeyRecord"] = field(default_factory=dict)
    batches: int = 0  # micro-batches Spark runs (with a trailing no-data batch, if any)

    def emitted_in_batch(self, batch: int) -> int:
        return sum(1 for w in self.emitted if w.batch == batch)

    def late_in_batch(self, batch: int) -> int:
        return sum(n for (b, _), n in self.late.items() if b == batch)

    def late_per_key(self) -> Dict[Hashable, int]:
        out: Dict[Hashable, int] = defaultdict(int)
        for (_, key), n in self.late.items():
            out[key] += n
        return dict(out)

    def open_rows(self) -> int:
        return sum(len(v) for v in self.open.values())


@dataclass
class BatchKeys:
    handled: set = field(default_factory=set)
    with_rows: set = field(default_factory=set)
    new: set = field(default_factory=set)
    released: set = field(default_factory=set)
    open_windows: int = 0  # of the handled keys, after the batch
    watermarks: List[int] = field(default_factory=list)  # wm(k) of the handled keys still in state
    global_watermark: Optional[int] = None  # E (micros) in this batch, if defined

    @property
    def lags(self) -> List[int]:
        """E - wm(k) of the handled keys still in state (none without E)."""
        return [] if self.global_watermark is None else [self.global_watermark - w for w in self.watermarks]


@dataclass(frozen=True)
class KeyRecord:
    watermark: Optional[int]
    max_event_time: int
    open_windows: int
    earliest_window_start: Optional[int]
    late_rows: int  # since the key has state
    regressions: int  # since the key has state


def window_start(t: int, size: int) -> int:
    # Python's % is already the floor-mod of the contract: ((t mod S) + S) mod S.
    return t - t % size


def window_starts(t: int, size: int, slide: Optional[int] = None) -> List[int]:
    """Starts of every window [start, start + size) holding t, latest first (Spark's bounds)."""
    slide = slide or size
    last = t - t % slide
    return [s for s in range(last, t - size, -slide)]


# The library's default max_skew (docs/semantics.md, "Bounded skew"): one hour, in micros.
DEFAULT_MAX_SKEW = 3600 * 1_000_000


def spark_watermark_ms(max_ms: Optional[int], lateness: int) -> Optional[int]:
    """Spark's global watermark (ms) after rows with max event time ``max_ms`` (ms): ``max -
    lateness``, undefined (None) until that is positive (Spark's watermark starts at 0)."""
    if max_ms is None or max_ms - lateness // 1000 <= 0:
        return None
    return max_ms - lateness // 1000


def run_model(
    batches: Sequence[Sequence[Row]],
    lateness: int,
    size: int,
    slide: Optional[int] = None,
    allowed: int = 0,
    max_skew: Optional[int] = DEFAULT_MAX_SKEW,
    emit: str = "final",
    accumulation: str = "accumulating",
    dedup: bool = False,
    batch_times_ms: Optional[Sequence[int]] = None,
) -> ModelResult:
    """``slide`` (micros, <= size) makes the windows sliding; None means tumbling.

    ``allowed`` (allowed lateness, micros): a window fires (revision 0) when wm(k) >= end,
    stays until wm(k) >= end + allowed, and fires again (next revision) at the end of each
    batch that added rows to it after its first firing; a row is late only when all of its
    windows have ``end + allowed <= wm(k)`` at the start of the batch.

    ``max_skew`` (micros; None: unbounded; default: the library's default): Spark's global watermark ``E_N`` at the start of
    batch N (``max over rows of batches < N of floor(t / 1000) ms - lateness``, undefined while
    not positive) floors every key's watermark at ``E_N - max_skew``, at the start of the batch
    (also for a key without state: a new or returning key starts there) and for keys without
    rows (Spark's event-time timers fire in the batch). At the end of a batch a key left without
    open windows leaves state (watermark, max event time); after the last batch, Spark runs one
    more (no-data) batch if ``E`` advanced in it.

    ``emit`` ("final" or "every_batch") and ``accumulation`` ("accumulating", "discarding",
    "retracting"): panes. At the end of a batch a window fires its on-time pane when wm(k) >=
    end for the first time (always, changed or not); after that a late pane per batch that
    added rows to it; before that, with "every_batch", an early pane per batch that added rows
    to it. A pane holds the window's values so far ("accumulating", "retracting": after a
    retraction row repeating the previous pane) or those since its previous pane
    ("discarding"). With emit="final" this is the rule of revisions above.

    ``emit="every <n> seconds"``: as "every_batch", but a window that changed since its last
    pane fires an early pane only at the end of a batch in which its key has rows and at least
    n seconds of processing time passed since its last pane (``batch_times_ms``: each batch's
    processing time, by default ``1000 * (n + 1)`` ms as in tests/support.py's run_in_memory);
    otherwise its change waits (a later batch of its key, or its on-time pane). Tests use no
    skew bound with it (a key without rows then has no batch).

    ``dedup`` (docs/semantics.md, "Deduplication"): each row's fourth element is its dedup
    values. Before anything else, a row whose values its key already has (from an earlier row,
    in this batch or an earlier one) is a copy: counted in ``duplicates``, not aggregated, not
    late, and it moves no watermark. Otherwise its values are remembered until the key's
    watermark, at the end of a batch, reaches the watermark from which a row at the first
    copy's time is late (its last window's end + ``allowed``); a key leaving state forgets them.
    Which of several copies in one batch is kept is unspecified in the library: tests give such
    copies equal times and values.
    """
    res = ModelResult()
    every_ms = None
    if emit.startswith("every "):
        amount, unit = emit.split()[1:]
        assert unit in ("second", "seconds"), emit
        every_ms = int(amount) * 1000
    early = emit != "final"
    last_pane_ms: Dict[Tuple[Hashable, int], int] = {}  # (key, start) -> processing time of its last pane
    dirty: set = set()  # (key, start) of the windows changed since their last pane
    fired: Dict[Tuple[Hashable, int], int] = {}  # (key, start) -> revisions fired so far
    on_time: set = set()  # (key, start) of the windows whose on-time pane fired
    since: Dict[Tuple[Hashable, int], List[Any]] = {}  # (key, start) -> values since its last pane
    last_pane: Dict[Tuple[Hashable, int], Tuple[Any, ...]] = {}  # (key, start) -> last pane's values
    max_time: Dict[Hashable, int] = {}  # key -> max event time seen (a key with state)
    held: Dict[Hashable, Optional[int]] = {}  # key -> held watermark (None: undefined)
    regressions: Dict[Hashable, int] = {}  # key -> attempted regressions since it has state
    late_since: Dict[Hashable, int] = {}  # key -> late rows since it has state
    seen: Dict[Hashable, Dict[Any, int]] = defaultdict(dict)  # key -> dedup values -> expiry (wm)
    global_max_ms: Optional[int] = None

    def raise_to(key: Hashable, value: Optional[int]) -> None:
        if value is not None and (held.get(key) is None or value > held[key]):
            held[key] = value

    all_batches = list(batches)
    n = 0
    while True:
        e_ms = spark_watermark_ms(global_max_ms, lateness) if max_skew is not None else None
        if n >= len(all_batches):
            # A trailing no-data batch runs when E advanced with the last batch.
            before = spark_watermark_ms(valid_max_ms(all_batches[:-1]), lateness)
            if max_skew is None or n > len(all_batches) or e_ms is None or (before is not None and e_ms <= before):
                break
            batch: Sequence[Row] = []
        else:
            batch = all_batches[n]
        floor = None if e_ms is None else e_ms * 1000 - max_skew
        for key in list(held):
            raise_to(key, floor)
        # wm_N(k): held (with the floor), or just the floor for a key without state.
        wm_start = {k: held[k] for k in held}
        batch_max: Dict[Hashable, int] = {}
        updated = set()  # windows that got rows in this batch
        info = BatchKeys()
        for row in batch:
            key, t, value = row[:3]
            if key is None or t is None:
                res.invalid += 1
                continue
            if dedup:
                if row[3] in seen[key]:
                    res.duplicates[(n, key)] = res.duplicates.get((n, key), 0) + 1
                    continue
                seen[key][row[3]] = window_starts(t, size, slide)[0] + size + allowed
            # Spark's global watermark follows the valid rows only (docs/semantics.md).
            ms = t // 1000
            global_max_ms = ms if global_max_ms is None else max(global_max_ms, ms)
            if key not in held and key not in wm_start:
                wm_start[key] = floor
                info.new.add(key)
            batch_max[key] = max(t, batch_max.get(key, t))
            w = wm_start.get(key)
            # The row goes into each of its windows that is still open; it is late only when
            # all of them are closed.
            open_starts = [s for s in window_starts(t, size, slide) if w is None or s + size + allowed > w]
            if not open_starts:
                late_since[key] = late_since.get(key, 0) + 1
                res.late[(n, key)] = res.late.get((n, key), 0) + 1
                res.late_watermark[(n, key)] = w
                res.late_rows.append((n, key, t, value))
            for start in open_starts:
                res.open.setdefault((key, start), []).append(value)
                since.setdefault((key, start), []).append(value)
                updated.add((key, start))
                dirty.add((key, start))
        # End of batch: advance the watermarks, then emit every window they passed.
        for key, t in batch_max.items():
            max_time[key] = max(t, max_time.get(key, t))
            proposal = max_time[key] - lateness
            if wm_start[key] is not None and proposal < wm_start[key]:
                # Held below the floor: an attempted regression, counted since the key has state.
                regressions[key] = regressions.get(key, 0) + 1
                res.held.append((n, key, regressions[key], wm_start[key]))
            raise_to(key, wm_start[key])
            raise_to(key, proposal)
        for (key, start) in sorted(res.open, key=repr):
            w = held.get(key)
            revision = fired.get((key, start), 0)
            due = w is not None and start + size <= w
            changed = (key, start) in dirty
            now_ms = batch_times_ms[n] if batch_times_ms is not None else 1000 * (n + 1)
            spaced = every_ms is None or (key in batch_max and (
                (key, start) not in last_pane_ms or now_ms - last_pane_ms[(key, start)] >= every_ms))
            if not due:
                pane = "early" if early and changed and spaced else None
            elif (key, start) not in on_time:
                pane = "on_time"
            else:
                pane = "late" if changed else None
            if pane is not None:
                shown = None if emit == "final" else pane
                values = tuple(since.get((key, start), [])) if accumulation == "discarding" else tuple(
                    res.open[(key, start)])
                if accumulation == "retracting" and (key, start) in last_pane:
                    res.emitted.append(Window(key, start, start + size, n, wm_start.get(key),
                                              last_pane[(key, start)], revision, shown, retraction=True))
                res.emitted.append(Window(key, start, start + size, n, wm_start.get(key), values, revision, shown))
                fired[(key, start)] = revision + 1
                last_pane[(key, start)] = values
                last_pane_ms[(key, start)] = now_ms
                dirty.discard((key, start))
                since[(key, start)] = []
                if pane == "on_time":
                    on_time.add((key, start))
                info.handled.add(key)  # a key without rows: by its event-time timer
            if w is not None and start + size + allowed <= w:
                del res.open[(key, start)]
                for d in (fired, since, last_pane, last_pane_ms):
                    d.pop((key, start), None)
                dirty.discard((key, start))
                on_time.discard((key, start))
                info.handled.add(key)
        for key in list(seen):
            w = held.get(key)
            seen[key] = {v: e for v, e in seen[key].items() if w is None or e > w}
        info.with_rows = set(batch_max)
        info.handled |= info.with_rows
        if max_skew is not None:
            with_windows = {k for k, _ in res.open}
            for key in [k for k in held if k not in with_windows]:
                del held[key]
                del max_time[key]
                regressions.pop(key, None)
                late_since.pop(key, None)
                seen.pop(key, None)
                res.released.append((n, key))
                info.released.add(key)
        for key in info.handled - info.released:
            info.open_windows += sum(1 for k, _ in res.open if k == key)
            if held.get(key) is not None:
                info.watermarks.append(held[key])
        info.global_watermark = None if e_ms is None else e_ms * 1000
        res.batch_keys.append(info)
        n += 1
    res.batches = n
    for key in held:
        starts = [st for k, st in res.open if k == key]
        res.key_state[key] = KeyRecord(held[key], max_time[key], len(starts), min(starts) if starts else None,
                                       late_since.get(key, 0), regressions.get(key, 0))
    return res


def valid_max_ms(batches: Sequence[Sequence[tuple]]) -> Optional[int]:
    """Max event time (ms) of the valid rows (key and event time not null): what Spark's global
    watermark follows."""
    ts = [r[1] // 1000 for b in batches for r in b if r[0] is not None and r[1] is not None]
    return max(ts) if ts else None


@dataclass(frozen=True)
class Session:
    key: Hashable
    start: int
    end: int
    batch: int  # micro-batch in which the session is emitted
    values: Tuple[Any, ...]  # its on-time values, sorted (a pane: as for Window)
    revision: int = 0  # kw_pane_index with emit != "final"
    # With emit != "final": "early", "on_time" or "late"; a retraction repeats the last pane of
    # a session this firing replaces (the session itself before it grew, or one merged into it),
    # with that pane's bounds and values, and the pane and index of the firing.
    pane: Optional[str] = None
    retraction: bool = False


@dataclass
class SessionResult:
    emitted: List[Session] = field(default_factory=list)
    late: Dict[Tuple[int, Hashable], int] = field(default_factory=dict)
    invalid: int = 0
    # sessions still open after the last batch: key -> [(start, end, values, revisions, dirty)]
    open: Dict[Hashable, List[tuple]] = field(default_factory=dict)


@dataclass
class _OpenSession:
    start: int
    end: int
    values: List[Any]
    revisions: int = 0
    dirty: bool = True
    on_time: bool = False  # its on-time pane (or that of a session merged into it) fired
    since: List[Any] = field(default_factory=list)  # values since its last pane (discarding)
    # the last panes (start, end, values) the next pane withdraws (retracting): its own, and
    # those of the sessions merged into it
    panes: List[tuple] = field(default_factory=list)


def run_session_model(batches: Sequence[Sequence[Row]], lateness: int, gap: Any, allowed: int = 0,
                      emit: str = "final", accumulation: str = "accumulating") -> SessionResult:
    """Session windows of docs/semantics.md; ``gap`` (micros) is a number or a function of the
    row's value (a per-row gap; None or <= 0 makes the row invalid).

    A row of batch N is late when ``t <= wm(k) - allowed`` at the start of batch N. Every
    on-time row opens ``[t, t + gap)``; at the end of batch N the key's open sessions and new
    intervals are merged where they touch (next start ``<=`` current end; a merge keeps the
    highest revision count, is changed if any part is and has fired on time if any part has),
    ``wm(k)`` advances with all of k's rows of the batch, and every session with ``end <=
    wm(k)`` that never fired or changed since it fired is emitted (in batch N) as its next
    revision; it leaves state once ``end + allowed <= wm(k)``.

    ``emit="every_batch"`` (docs/semantics.md, "Early panes of sessions"): a session that did
    not fire on time fires an early pane at the end of every batch that changed it while
    ``end > wm(k)``, its on-time pane when ``wm(k)`` first reaches its end, and after that a
    late pane at the end of every batch that changed it (also when a merge moved its end past
    the watermark). ``accumulation`` as in ``run_model``; with "retracting" a pane comes after
    one retraction per pane it replaces (the session's own last pane, and the last pane of each
    session merged into it, in start order).
    """
    res = SessionResult()
    max_time: Dict[Hashable, int] = {}
    state: Dict[Hashable, List[_OpenSession]] = {}
    for n, batch in enumerate(batches):
        wm_start = {k: m - lateness for k, m in max_time.items()}
        new: Dict[Hashable, List[_OpenSession]] = defaultdict(list)
        for key, t, value in batch:
            g = gap(value) if callable(gap) else gap
            if key is None or t is None or g is None or g <= 0:
                res.invalid += 1
                continue
            if key in wm_start and t <= wm_start[key] - allowed:
                res.late[(n, key)] = res.late.get((n, key), 0) + 1
            else:
                new[key].append(_OpenSession(t, t + g, [value], since=[value]))
            max_time[key] = max(t, max_time.get(key, t))
        for key in set(state) | set(new):
            # Stable: a stored session before a new interval of the same start, as the operator
            # sorts them (the order only decides the order of retractions).
            intervals = sorted(state.get(key, []) + new.get(key, []), key=lambda i: i.start)
            merged: List[_OpenSession] = []
            for s in intervals:
                if merged and s.start <= merged[-1].end:
                    m = merged[-1]
                    merged[-1] = _OpenSession(m.start, max(m.end, s.end), m.values + s.values,
                                              max(m.revisions, s.revisions), m.dirty or s.dirty,
                                              m.on_time or s.on_time, m.since + s.since, m.panes + s.panes)
                else:
                    merged.append(s)
            wm = max_time[key] - lateness
            keep = []
            for s in merged:
                due = s.end <= wm
                if s.on_time:
                    pane = "late" if s.dirty and (due or emit == "every_batch") else None
                elif due:
                    pane = "on_time"
                else:
                    pane = "early" if emit == "every_batch" and s.dirty else None
                if pane is not None:
                    shown = None if emit == "final" else pane
                    if accumulation == "retracting":
                        for start, end, values in s.panes:
                            res.emitted.append(Session(key, start, end, n, values, s.revisions, shown, True))
                    values = tuple(sorted(s.since if accumulation == "discarding" else s.values, key=repr))
                    res.emitted.append(Session(key, s.start, s.end, n, values, s.revisions, shown))
                    s.panes = [(s.start, s.end, values)]
                    s.since = []
                    s.revisions, s.dirty = s.revisions + 1, False
                    s.on_time = s.on_time or pane == "on_time"
                if not s.end + allowed <= wm:
                    keep.append(s)
            state[key] = keep
    res.open = {k: [(s.start, s.end, s.values, s.revisions, s.dirty) for s in ss] for k, ss in state.items()}
    return res


def one_row_batches(batches: Sequence[Sequence[Row]]) -> Tuple[List[List[Row]], List[int]]:
    """The rows of ``batches`` in order, each as a micro-batch of its own, and the micro-batch
    each came from."""
    rows = [[r] for b in batches for r in b]
    origin = [n for n, b in enumerate(batches) for _ in b]
    return rows, origin


@dataclass
class PerRowResult:
    """The record-at-a-time model (``run_model_per_row``, ``run_session_model_per_row``), by the
    micro-batch each row arrived in: what the row's step emitted, and its late rows."""
    emitted: List[Any] = field(default_factory=list)  # Window or Session, ``batch`` the row's
    # (batch, key, wm(key) before the row) -> late rows
    late: Dict[Tuple[int, Hashable, Optional[int]], int] = field(default_factory=dict)


def _by_origin(model: Any, origin: List[int], watermarks: bool) -> PerRowResult:
    from dataclasses import replace
    out = PerRowResult(emitted=[replace(w, batch=origin[w.batch]) for w in model.emitted])
    for (n, key), count in model.late.items():
        wm = model.late_watermark[(n, key)] if watermarks else None
        k = (origin[n], key, wm)
        out.late[k] = out.late.get(k, 0) + count
    return out


def run_model_per_row(batches: Sequence[Sequence[Row]], lateness: int, size: int, slide: Optional[int] = None,
                      allowed: int = 0) -> PerRowResult:
    """Real-time mode's record-at-a-time rule (docs/semantics.md, "Real-time mode"), on the key's
    own rows (no skew bound): a row is late when its windows are closed for ``wm(k)`` as it
    stands *before that row*; then ``wm(k)`` advances with the row, and every window it passes
    is emitted at once, with that row. This is ``run_model`` with every row a micro-batch of its
    own; the results are reported by the micro-batch each row arrived in."""
    rows, origin = one_row_batches(batches)
    return _by_origin(run_model(rows, lateness, size, slide, allowed=allowed, max_skew=None), origin, True)


def run_session_model_per_row(batches: Sequence[Sequence[Row]], lateness: int, gap: Any,
                              allowed: int = 0) -> PerRowResult:
    """``run_session_model`` under the record-at-a-time rule (see ``run_model_per_row``); the
    late rows' watermark is not modelled for sessions (None)."""
    rows, origin = one_row_batches(batches)
    return _by_origin(run_session_model(rows, lateness, gap, allowed), origin, False)
