"""Panes and accumulation modes (docs/semantics.md, "Panes and accumulation"), in memory: the
operator (tests/test_operator_in_memory.py's harness) against the reference model for every
emit strategy and accumulation mode, tumbling and sliding windows, with and without allowed
lateness. Besides the model's panes, each case checks on the operator's own output that the
last pane of each window equals the window's final result of emit="final" (the model's), that
discarding panes add up to it, that retractions cancel exactly the pane before them, and that
each window has exactly one on-time pane with indexes 0, 1, 2, ... in order."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference_model import run_model
from support import LATENESS_CHOICES_S, SECOND, in_memory, packed_streams, run_in_memory
from test_operator_in_memory import agg_of, aggs, late_per_batch_key, options

STRATEGIES = [("every_batch", "accumulating"), ("every_batch", "discarding"), ("every_batch", "retracting")]


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
       strategy=st.sampled_from(STRATEGIES))
def test_panes_in_memory(harness, batches, lateness_s, window, allowed_s, strategy):
    emit, accumulation = strategy
    size_s, slide_s = window
    spec = {"size": f"{size_s} seconds", "emit": emit, "accumulation": accumulation}
    if slide_s:
        spec["slide"] = f"{slide_s} seconds"
    if allowed_s:
        spec["allowed_lateness"] = f"{allowed_s} seconds"
    args = dict(lateness=lateness_s * SECOND, size=size_s * SECOND, slide=slide_s and slide_s * SECOND,
                allowed=allowed_s * SECOND, max_skew=None)
    model = run_model(batches, emit=emit, accumulation=accumulation, **args)
    note(f"lateness={lateness_s}s window={window} allowed={allowed_s}s {strategy} model={model}")
    out = run_in_memory(harness(options(lateness_s, window=spec), aggs()), batches, "window")
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
    emit='every_batch' changes neither the late rows nor what is left open."""
    size_s, slide_s = window
    args = dict(lateness=lateness_s * SECOND, size=size_s * SECOND, slide=slide_s and slide_s * SECOND,
                allowed=allowed_s * SECOND, max_skew=None)
    final = run_model(batches, **args)
    want = {}
    for w in final.emitted:
        want[(w.key, w.start)] = Counter(w.values)
    for accumulation in ("accumulating", "discarding", "retracting"):
        model = run_model(batches, emit="every_batch", accumulation=accumulation, **args)
        assert model.late == final.late and model.open == final.open
        if not allowed_s:  # the on-time pane is each window's last: a sink can tell it
            assert {w.pane for w in model.emitted} <= {"early", "on_time"}
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
