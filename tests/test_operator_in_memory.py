"""The operator's rules, in memory, against the reference model (tests/reference_model.py),
with hundreds of generated cases per rule.

Each case drives one KeyedWindowProcessor per key over the in-memory state store and timers of
Spark's TwsTester, micro-batch by micro-batch: the partials of a batch are planned by the same
planner steps as in a streaming query, over a batch DataFrame (see
jvm/src/test/scala/.../testing/OperatorHarness.scala). No streaming query runs, so a case
takes a fraction of a second; the end-to-end layer (tests/test_reference_model.py) runs the
same model against real streaming queries with fewer cases.

Checked per case: every emitted window or session (bounds, aggregates, revision, the key's
watermark at the start of the emitting batch) in the batch the model emits it, and the late
rows per (batch, key) with the key's watermark.
"""

from __future__ import annotations

import pytest
from collections import Counter
from typing import Any, Dict

from hypothesis import given, note
from hypothesis import strategies as st
from pyspark.sql import functions as F

from reference_model import run_model, run_session_model
from support import (
    LATENESS_CHOICES_S, SECOND, WINDOW_CHOICES_S, aggs, check_emitted_sessions, check_windows, in_memory,
    late_per_batch_key, options, packed_streams, per_row_gap, run_in_memory, session_aggs, window_spec,
)

# The fast layer: ./dev/test --quick runs the tests marked quick (pytest.ini).
pytestmark = pytest.mark.quick


@in_memory
@given(batches=packed_streams(), lateness_s=st.sampled_from(LATENESS_CHOICES_S), window_s=st.sampled_from(WINDOW_CHOICES_S),
       allowed_s=st.sampled_from([0, 0, 0, 7]))
def test_tumbling_windows_in_memory(harness, batches, lateness_s, window_s, allowed_s):
    model = run_model(batches, lateness_s * SECOND, window_s * SECOND, allowed=allowed_s * SECOND, max_skew=None)
    note(f"lateness={lateness_s}s window={window_s}s allowed={allowed_s}s model={model}")
    h = harness(options(lateness_s, window=window_spec(window_s, allowed_s=allowed_s)), aggs())
    check_windows(run_in_memory(h, batches, "window"), model)


@in_memory
@given(batches=packed_streams(), lateness_s=st.sampled_from(LATENESS_CHOICES_S),
       window_slide=st.sampled_from([(10, 5), (10, 2), (6, 4), (5, 5)]))
def test_sliding_windows_in_memory(harness, batches, lateness_s, window_slide):
    window_s, slide_s = window_slide
    model = run_model(batches, lateness_s * SECOND, window_s * SECOND, slide_s * SECOND, max_skew=None)
    note(f"lateness={lateness_s}s window={window_s}s slide={slide_s}s model={model}")
    h = harness(options(lateness_s, window=window_spec(window_s, slide_s)), aggs())
    check_windows(run_in_memory(h, batches, "window"), model)


@in_memory
@given(batches=packed_streams(), lateness_s=st.sampled_from([0, 5]), gap_s=st.sampled_from([3, 10, None]),
       allowed_s=st.sampled_from([0, 0, 6]))
def test_sessions_in_memory(harness, batches, lateness_s, gap_s, allowed_s):
    gap = per_row_gap if gap_s is None else gap_s * SECOND
    model = run_session_model(batches, lateness_s * SECOND, gap, allowed_s * SECOND)
    note(f"lateness={lateness_s}s gap={gap_s}s allowed={allowed_s}s model={model}")
    session: Dict[str, Any] = {} if gap_s is None else {"gap": f"{gap_s} seconds"}
    if allowed_s:
        session["allowed_lateness"] = f"{allowed_s} seconds"
    columns = None if gap_s is not None else {
        "gap": F.when(F.col("temp") > 20, "10 seconds").when(F.col("temp") >= 0, "3 seconds")
        .when(F.col("temp") < 0, "0 seconds")}
    h = harness(options(lateness_s, session=session), session_aggs(), columns)
    out = run_in_memory(h, batches, "session_window")
    check_emitted_sessions(out, model)
    assert late_per_batch_key(out) == Counter(model.late)
