"""Panes and accumulation modes (docs/semantics.md, "Panes and accumulation"), in memory: the
operator (tests/test_operator_in_memory.py's harness) against the reference model for every
emit strategy and accumulation mode, tumbling and sliding windows, with and without allowed
lateness. Besides the model's panes, each case checks on the operator's own output that the
last pane of each window equals the window's final result of emit="final" (the model's), that
discarding panes add up to it, that retractions cancel exactly the pane before them, and that
each window has exactly one on-time pane with indexes 0, 1, 2, ... in order."""

from __future__ import annotations

from collections import Counter, defaultdict
from types import SimpleNamespace

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference_model import run_model, run_session_model
from support import (
    LATENESS_CHOICES_S, SECOND, agg_of, aggs, in_memory, late_per_batch_key, options, packed_streams, run_in_memory,
    session_aggs, session_values,
)

# The fast layer: ./dev/test --quick runs the tests marked quick (pytest.ini).
pytestmark = pytest.mark.quick

SESSION_STRATEGIES = [("every_batch", "accumulating"), ("every_batch", "discarding"), ("every_batch", "retracting")]
# emit='every <duration>': early panes at least that much processing time apart (the harness'
# batch clock, drawn per case).
STRATEGIES = SESSION_STRATEGIES + [("every 2 seconds", "accumulating"), ("every 2 seconds", "discarding"),
                                   ("every 3 seconds", "retracting")]


def pane_rows(out):
    return [(n, r) for n, r in out if r.kw_kind == "window"]


def check_against_final(rows, final, accumulation) -> None:
    """`rows`: (batch, output row) of the windows in pane mode; `final`: the model's
    emit='final' result on the same stream (its last revision per window is the final value)."""
    final_values = {}
    for w in final.emitted:  # in batch order: the last revision wins
        final_values[(w.key, w.start)] = w.values
    panes = defaultdict(list)
    for n, r in rows:
        panes[(r.device, r.start)].append(r)
    on_time_windows = {k for k, ps in panes.items() if any(p.kw_pane == "on_time" for p in ps)}
    # A window has a final result exactly when its on-time pane fired.
    assert on_time_windows == set(final_values)
    for k, ps in panes.items():
        shown = [p for p in ps if not getattr(p, "kw_retraction", False)]
        assert [p.kw_pane_index for p in shown] == list(range(len(shown)))
        kinds = [p.kw_pane for p in shown]
        assert kinds.count("on_time") <= 1
        # early panes, then the on-time pane, then late panes
        assert kinds == sorted(kinds, key=["early", "on_time", "late"].index)
        if k not in final_values:
            continue
        want = agg_of(final_values[k])
        if accumulation == "discarding":
            ns = [p.n for p in shown]
            sums = [p.s for p in shown if p.s is not None]
            los = [p.lo for p in shown if p.lo is not None]
            his = [p.hi for p in shown if p.hi is not None]
            assert (sum(ns), sum(sums) if sums else None, min(los) if los else None,
                    max(his) if his else None) == pytest.approx(want)
        else:
            last = shown[-1]
            assert (last.n, last.s, last.lo, last.hi) == pytest.approx(want)
        if accumulation == "retracting":
            # Each retraction repeats the pane just before it, in the same batch as its
            # replacement: a sink adding rows (retractions subtracted) holds the last pane.
            previous = None
            for i, p in enumerate(ps):
                if getattr(p, "kw_retraction", False):
                    assert previous is not None
                    assert (p.n, p.s, p.lo, p.hi) == (previous.n, previous.s, previous.lo, previous.hi)
                    assert not ps[i + 1].kw_retraction and ps[i + 1].kw_pane_index == p.kw_pane_index
                else:
                    previous = p
            assert sum(-p.n if p.kw_retraction else p.n for p in ps) == want[0]


@settings(in_memory, max_examples=min(in_memory.max_examples, 25))
@given(batches=packed_streams(), lateness_s=st.sampled_from(LATENESS_CHOICES_S),
       window=st.sampled_from([(10, None), (4, None), (10, 5), (6, 4)]), allowed_s=st.sampled_from([0, 0, 7]),
       strategy=st.sampled_from(STRATEGIES),
       steps_ms=st.lists(st.sampled_from([400, 1000, 2000, 3500]), min_size=30, max_size=30))
def test_panes_in_memory(harness, batches, lateness_s, window, allowed_s, strategy, steps_ms):
    emit, accumulation = strategy
    # Each batch's processing time (ms): steps of 0.4 to 3.5 s.
    times_ms = [sum(steps_ms[:n + 1]) for n in range(len(batches))]
    size_s, slide_s = window
    spec = {"size": f"{size_s} seconds", "emit": emit, "accumulation": accumulation}
    if slide_s:
        spec["slide"] = f"{slide_s} seconds"
    if allowed_s:
        spec["allowed_lateness"] = f"{allowed_s} seconds"
    args = dict(lateness=lateness_s * SECOND, size=size_s * SECOND, slide=slide_s and slide_s * SECOND,
                allowed=allowed_s * SECOND, max_skew=None)
    model = run_model(batches, emit=emit, accumulation=accumulation, batch_times_ms=times_ms, **args)
    note(f"lateness={lateness_s}s window={window} allowed={allowed_s}s {strategy} times={times_ms} model={model}")
    out = run_in_memory(harness(options(lateness_s, window=spec), aggs()), batches, "window",
                        clocks=[(0, t) for t in times_ms])
    rows = pane_rows(out)
    got = Counter((n, r.device, r.start, r.end, r.n, r.s, r.lo, r.hi, r.wm, r.kw_pane, r.kw_pane_index,
                   getattr(r, "kw_retraction", False)) for n, r in rows)
    want = Counter((w.batch, w.key, w.start, w.end) + agg_of(w.values)
                   + (w.watermark_at_start, w.pane, w.revision, w.retraction) for w in model.emitted)
    assert got == want
    assert late_per_batch_key(out) == Counter(model.late)
    check_against_final(rows, run_model(batches, **args), accumulation)
    # The retraction column exists only in retracting mode.
    if accumulation != "retracting":
        assert all("kw_retraction" not in vars(r) for _, r in rows)


@settings(in_memory, max_examples=100)
@given(batches=packed_streams(), lateness_s=st.sampled_from(LATENESS_CHOICES_S),
       window=st.sampled_from([(10, None), (10, 5)]), allowed_s=st.sampled_from([0, 7]))
def test_model_panes_agree_with_final(batches, lateness_s, window, allowed_s):
    """The model alone (no Spark): with every accumulation mode, the windows' last panes,
    summed discarding panes and netted retractions all give emit='final''s final values, and
    early panes (every batch, or every 2-3 s of processing time at 1 s per batch) change neither
    the late rows nor what is left open; spaced panes of a window are that far apart."""
    size_s, slide_s = window
    args = dict(lateness=lateness_s * SECOND, size=size_s * SECOND, slide=slide_s and slide_s * SECOND,
                allowed=allowed_s * SECOND, max_skew=None)
    final = run_model(batches, **args)
    want = {}
    for w in final.emitted:
        want[(w.key, w.start)] = Counter(w.values)
    for emit, accumulation in STRATEGIES:
        model = run_model(batches, emit=emit, accumulation=accumulation, **args)
        assert model.late == final.late and model.open == final.open
        if not allowed_s:  # the on-time pane is each window's last: a sink can tell it
            assert {w.pane for w in model.emitted} <= {"early", "on_time"}
        if emit.startswith("every "):
            gap = int(emit.split()[1])  # batches, at one second each
            early = defaultdict(list)
            for w in model.emitted:
                if w.pane == "early" and not w.retraction:
                    early[(w.key, w.start)].append(w.batch)
            assert all(b - a >= gap for bs in early.values() for a, b in zip(bs, bs[1:]))
        net = defaultdict(Counter)
        for w in model.emitted:
            if accumulation == "discarding":
                net[(w.key, w.start)].update(w.values)
            elif w.retraction:
                net[(w.key, w.start)].subtract(w.values)
            else:
                net[(w.key, w.start)].update(w.values)
        closed = {k: +c for k, c in net.items()
                  if any(w.pane == "on_time" and (w.key, w.start) == k for w in model.emitted)}
        if accumulation == "accumulating":
            closed = {}
            for w in model.emitted:
                if (w.key, w.start) in want:
                    closed[(w.key, w.start)] = Counter(w.values)
        assert closed == want



def check_sessions_against_final(rows, final, final_open, accumulation, allowed) -> None:
    """Properties of session panes, on the operator's own output (`rows`: (batch, output row))
    against the model's emit='final' result on the same stream (`final`: its sessions emitted,
    `final_open`: key -> sessions still open at the end):
    - retracting: the rows minus the retractions are exactly the sessions at the end (every
      session the key ever formed, each once, with all its values);
    - the last pane of every session final's emit='final' fired last (its last revision) is
      that revision; discarding panes within a session's bounds add up to it;
    - the panes within each session's bounds: without allowed lateness (no merge reaches a
      session that fired on time) early ones, then at most one on-time pane; with it (sessions
      that each fired on time may merge), once one of them is on time the last is not early."""
    # Sessions at the end per key: final's last revision of each settled session, and those
    # still open (a session that grew past the watermark is open, and newer than its revision).
    ends = defaultdict(dict)  # key -> (start, end) -> values
    for s in final.emitted:
        for (a, b) in list(ends[s.key]):
            if s.start <= a and b <= s.end:
                del ends[s.key][(a, b)]  # superseded by a revision of a session containing it
        ends[s.key][(s.start, s.end)] = session_values(s.values)
    for key, sessions in final_open.items():
        for start, end, values, _, _ in sessions:
            for (a, b) in list(ends[key]):
                if start <= a and b <= end:
                    del ends[key][(a, b)]
            ends[key][(start, end)] = session_values(values)
    shown = [(n, r) for n, r in rows if not getattr(r, "kw_retraction", False)]
    if accumulation == "retracting":
        net = defaultdict(Counter)
        for _, r in rows:
            net[r.device][(r.start, r.end, session_values(r.temps))] += -1 if r.kw_retraction else 1
        got = {k: {s: c for s, c in v.items() if c} for k, v in net.items()}
        assert {k: v for k, v in got.items() if v} == {
            k: {(a, b, vs): 1 for (a, b), vs in v.items()} for k, v in ends.items() if v}
    # Every session is emitted with its final values: the latest pane within its bounds
    # (accumulating, retracting), the sum of the panes within them (discarding).
    for key, sessions in ends.items():
        for (a, b), values in sessions.items():
            within = [r for _, r in shown if r.device == key and a <= r.start and r.end <= b]
            assert within, (key, a, b)
            if accumulation == "discarding":
                assert Counter(v for r in within for v in session_values(r.temps)) == Counter(values)
            else:
                last = within[-1]
                assert (last.start, last.end, session_values(last.temps)) == (a, b, values)
    for key in {r.device for _, r in shown}:
        kinds = [(r.start, r.end, r.kw_pane) for _, r in shown if r.device == key]
        for (a, b) in ends[key]:
            lineage = [p for s, e, p in kinds if a <= s and e <= b]
            if not allowed:
                assert lineage.count("on_time") <= 1
                assert lineage == sorted(lineage, key=["early", "on_time"].index)
            if "on_time" in lineage:
                assert lineage[-1] != "early"


@settings(in_memory, max_examples=min(in_memory.max_examples, 20))
@given(batches=packed_streams(), lateness_s=st.sampled_from([0, 5]), gap_s=st.sampled_from([3, 10]),
       allowed_s=st.sampled_from([0, 0, 6]), strategy=st.sampled_from(SESSION_STRATEGIES))
def test_session_panes_in_memory(harness, batches, lateness_s, gap_s, allowed_s, strategy):
    emit, accumulation = strategy
    session = {"gap": f"{gap_s} seconds", "emit": emit, "accumulation": accumulation}
    if allowed_s:
        session["allowed_lateness"] = f"{allowed_s} seconds"
    args = (batches, lateness_s * SECOND, gap_s * SECOND, allowed_s * SECOND)
    model = run_session_model(*args, emit=emit, accumulation=accumulation)
    note(f"lateness={lateness_s}s gap={gap_s}s allowed={allowed_s}s {strategy} model={model}")
    h = harness(options(lateness_s, session=session), session_aggs())
    out = run_in_memory(h, batches, "session_window")
    rows = pane_rows(out)
    got = Counter((n, r.device, r.start, r.end, session_values(r.temps), r.kw_pane, r.kw_pane_index,
                   getattr(r, "kw_retraction", False)) for n, r in rows)
    want = Counter((s.batch, s.key, s.start, s.end, session_values(s.values), s.pane, s.revision, s.retraction)
                   for s in model.emitted)
    assert got == want
    assert late_per_batch_key(out) == Counter(model.late)
    final = run_session_model(*args)
    check_sessions_against_final(rows, final, final.open, accumulation, allowed_s)


@settings(in_memory, max_examples=50)
@given(batches=packed_streams(), lateness_s=st.sampled_from([0, 5]), gap_s=st.sampled_from([3, 10]),
       allowed_s=st.sampled_from([0, 6]))
def test_session_model_panes_agree_with_final(batches, lateness_s, gap_s, allowed_s):
    """The session model alone (no Spark), every accumulation mode: the properties of
    check_sessions_against_final hold for its panes, emit='every_batch' changes neither the late
    rows nor the sessions left open, and without allowed lateness no pane is late."""
    args = (batches, lateness_s * SECOND, gap_s * SECOND, allowed_s * SECOND)
    final = run_session_model(*args)
    for accumulation in ("accumulating", "discarding", "retracting"):
        model = run_session_model(*args, emit="every_batch", accumulation=accumulation)
        assert model.late == final.late
        assert {k: [s[:3] for s in v] for k, v in model.open.items()} == {
            k: [s[:3] for s in v] for k, v in final.open.items()}
        if not allowed_s:
            assert {s.pane for s in model.emitted} <= {"early", "on_time"}
        rows = [(s.batch, SimpleNamespace(device=s.key, start=s.start, end=s.end, temps=list(s.values),
                                          kw_pane=s.pane, kw_retraction=s.retraction)) for s in model.emitted]
        check_sessions_against_final(rows, final, final.open, accumulation, allowed_s)
