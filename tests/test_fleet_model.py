"""closing='fleet' in the policy model (tests/policy_model.py): two promises of docs/semantics.md
("Fleet closing") checked on generated streams, in pure Python (no Spark; the in-memory and
end-to-end tests hold the engine to this model).

- Never stricter than Spark's global watermark: with the skew bound an hour, every row the
  fleet policy counts late, Spark's own rule (window end ``<= E_{N-1}``) counts late too.
- Single late rows never hold a key's windows back: adding a row at or below its key's max
  event time (a retransmission) to a batch in which the key has rows leaves the batch in
  which every other window is emitted unchanged.
- A batch that shows a key in step forgets its skew: when a batch moves the key's max event
  time ``M(k)`` to at least ``E_N + L``, every window of the key ending at or before
  ``min(E_N, M(k))`` is emitted in that batch at the latest (as Spark's aggregation emits it),
  whatever skew earlier delayed rows taught (issue 42: sparse keys in step).
"""

from __future__ import annotations

from typing import Dict, Hashable, Tuple

from hypothesis import given, note, settings
from hypothesis import strategies as st

from policy_model import Policy, run_policy_model
from reference_model import spark_watermark_ms, valid_max_ms
from support import SECOND, policy_stream

WINDOW = 10 * SECOND


def spark_late_rows(batches, lateness: int) -> Dict[Tuple[int, Hashable], int]:
    """Late rows per (batch, key) by Spark's rule: in batch N, window end <= E_{N-1}."""
    late: Dict[Tuple[int, Hashable], int] = {}
    for n, batch in enumerate(batches):
        e_ms = spark_watermark_ms(valid_max_ms(batches[:n - 1]), lateness) if n >= 1 else None
        for key, t, *_ in batch:
            if e_ms is not None and t - t % WINDOW + WINDOW <= e_ms * 1000:
                late[(n, key)] = late.get((n, key), 0) + 1
    return late


@settings(max_examples=150, deadline=None)
@given(batches=policy_stream(max_rows=40), lateness_s=st.sampled_from([0, 5]))
def test_fleet_never_stricter_than_spark(batches, lateness_s):
    model = run_policy_model(batches, WINDOW, Policy(lateness_s * SECOND, fleet=True))
    spark = spark_late_rows(batches, lateness_s * SECOND)
    note(f"fleet late={model.late} spark late={spark}")
    for at, n in model.late.items():
        assert n <= spark.get(at, 0), at


@settings(max_examples=150, deadline=None)
@given(batches=policy_stream(max_rows=40), lateness_s=st.sampled_from([0, 5]), data=st.data())
def test_fleet_retransmission_holds_no_window_back(batches, lateness_s, data):
    # A batch N >= 1 and a key with rows in it and before it; the retransmitted row lies at or
    # below that key's max event time before batch N (so it moves neither M(k) nor E).
    candidates = [(n, key) for n in range(1, len(batches)) for key in sorted({r[0] for r in batches[n]})
                  if any(r[0] == key for b in batches[:n] for r in b)]
    if not candidates:
        return
    n, key = data.draw(st.sampled_from(candidates))
    before = max(r[1] for b in batches[:n] for r in b if r[0] == key)
    t = before - data.draw(st.integers(0, 40)) * SECOND
    changed = [list(b) for b in batches]
    changed[n].insert(data.draw(st.integers(0, len(changed[n]))), (key, t, 99.0, None, "a"))
    policy = Policy(lateness_s * SECOND, fleet=True)
    original = {(k, s): b for k, s, _, b, _ in run_policy_model(batches, WINDOW, policy).emitted}
    with_row = {(k, s): b for k, s, _, b, _ in run_policy_model(changed, WINDOW, policy).emitted}
    note(f"retransmitted {(n, key, t)}; original={original} with the row={with_row}")
    for window, batch in original.items():
        assert with_row.get(window) == batch, window


@settings(max_examples=150, deadline=None)
@given(batches=policy_stream(max_rows=40), lateness_s=st.sampled_from([0, 5]))
def test_fleet_key_in_step_forgets_its_skew(batches, lateness_s):
    lateness = lateness_s * SECOND
    model = run_policy_model(batches, WINDOW, Policy(lateness, fleet=True))
    emitted = {(k, s): b for k, s, _, b, _ in model.emitted}
    for n in range(1, len(batches)):
        e_ms = spark_watermark_ms(valid_max_ms(batches[:n]), lateness)
        if e_ms is None:
            continue
        e = e_ms * 1000
        for key in sorted({r[0] for r in batches[n]}):
            before = [r[1] for b in batches[:n] for r in b if r[0] == key]
            m = max(before + [r[1] for r in batches[n] if r[0] == key])
            if not before or m <= max(before) or m - lateness < e:
                continue  # no row of the key before, the max did not move, or behind the fleet
            bound = min(e, m)
            note(f"batch {n}: key {key} in step (M={m}, E={e}); emitted={sorted(emitted.items())}")
            for (k, start), b in emitted.items():
                if k == key and start + WINDOW <= bound:
                    assert b <= n, (key, start, b, n)
