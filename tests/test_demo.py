"""Smoke test of the IoT demo (examples/iot_demo.py, run by dev/demo) in quick mode.

Runs the demo in-process on the shared session and checks the story it tells: on the windows
that the keyed query closed (a window still open at the end of the stream is emitted by
neither query), the keyed watermark counts ~all events, batch uploaders included, while
Spark's global watermark drops a large share of the batch uploaders' events; and the
per-key watermark panel's data equals what the generated input implies."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the whole demo (see pytest.ini)

DEMO = Path(__file__).resolve().parents[1] / "examples" / "iot_demo.py"


def _load_demo():
    spec = importlib.util.spec_from_file_location("iot_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_quick_demo_tells_the_story(spark, tmp_path):
    demo = _load_demo()
    png = tmp_path / "iot_demo.png"
    metrics = demo.main(
        ["--quick", "--workdir", str(tmp_path / "work"), "--out", str(png)], spark=spark
    )
    glob, keyed = metrics["methods"]["global"], metrics["methods"]["keyed"]
    _check_watermark_panel(demo, metrics)

    # The fleet rollup (device -> site -> fleet, three keyed stages in one query) counts more of
    # the fleet's events than Spark's global watermark, in the fleet minutes both emitted.
    rollup = metrics["rollup"]
    assert rollup["fleet_windows_compared"] >= 1
    assert rollup["rollup"]["pct_events_counted"] > rollup["global"]["pct_events_counted"]

    # Ours: ~every event of the windows it closed is counted, for every class of device.
    assert keyed["pct_events_counted_closed"] >= 99.0
    for cls in ("fast", "slow", "uploader"):
        assert keyed["pct_closed_by_class"][cls] >= 99.0, cls
    # Spark's global watermark: same on fast and slow devices, but it drops a large share of
    # the batch uploaders' rows (and whole windows of them), on the same fair basis.
    for cls in ("fast", "slow"):
        assert glob["pct_closed_by_class"][cls] >= 98.0, cls
    assert glob["pct_closed_by_class"]["uploader"] <= keyed["pct_closed_by_class"]["uploader"] - 25
    assert glob["pct_events_counted_closed"] < keyed["pct_events_counted_closed"] - 2
    assert (glob["windows_emitted_by_class"]["uploader"]
            < keyed["windows_emitted_by_class"]["uploader"])
    assert glob["windows_with_missing_rows"] > keyed["windows_with_missing_rows"]

    # Every row is accounted for: the keyed query's late rows (retransmitted packets) explain
    # its incomplete windows, and nothing is counted twice.
    assert keyed["windows_with_missing_rows"] <= keyed["late_rows_reported"]
    assert keyed["events_counted"] + keyed["late_rows_reported"] <= metrics["events"]
    assert keyed["windows_emitted"] <= metrics["truth_windows"]

    # Emission timing: ours emits fast devices' windows no later than the global watermark
    # (Spark evicts one micro-batch after the watermark passes), and windows are emitted
    # after they end plus the lateness.
    fast_keyed = keyed["emit_delay_by_class"]["fast"]["median_s"]
    fast_global = glob["emit_delay_by_class"]["fast"]["median_s"]
    assert 30 <= fast_keyed <= fast_global
    # A window closes when a watermark (its max event time minus the lateness) passes its end,
    # and its rows arrive no earlier than their event time: every delay is at least the
    # lateness, for both queries; the p95 lies between the median and the longest delay.
    lateness_s = demo._duration_s(demo.Config(**metrics["config"]).lateness)
    for method in (keyed, glob):
        delays = sorted(d for per_class in method["emit_delays_s"].values() for d in per_class)
        assert delays and delays[0] >= lateness_s, delays[:3]
        assert method["emit_delay_median_s"] <= method["emit_delay_p95_s"] <= delays[-1]

    assert png.stat().st_size > 10_000


def _check_watermark_panel(demo, metrics) -> None:
    """The per-key watermark panel against the generated input (recomputed here in Python):
    after each micro-batch of the keyed run, a device's watermark read from the query's state
    is the max event time of its rows that had arrived by then minus the lateness (undefined
    before its first row; the skew floor, an hour behind the fleet, cannot bind in 6 minutes),
    and never decreases; Spark's global watermark at the end of the native run is the max event
    time over all rows minus the lateness."""
    timeline = metrics["key_watermarks"]
    cfg = demo.Config(**metrics["config"])
    events, device_class = demo.generate(cfg)
    lateness_ms = demo._duration_s(cfg.lateness) * 1000

    def epoch_ms(ts_ms: int) -> int:
        return demo.T0_EPOCH_S * 1000 + ts_ms

    assert {cls: device_class[d] for cls, d in timeline["devices"].items()} == {
        c: c for c in ("fast", "slow", "uploader")}
    keyed = timeline["keyed"]
    assert [p["batch_id"] for p in keyed] == list(range(len(keyed)))
    assert len(keyed) >= metrics["micro_batch_files"]
    for device in timeline["devices"].values():
        series = []
        for point in keyed:
            seen = [e.ts_ms for e in events
                    if e.device == device and e.arrival_ms < point["arrival_s"] * 1000]
            expected = (epoch_ms(max(seen)) - lateness_ms) * 1000 if seen else None
            assert point["watermark_us"][device] == expected, (device, point)
            series.append(point["watermark_us"][device])
        defined = [w for w in series if w is not None]
        assert defined == sorted(defined) and len(set(defined)) >= 2, device
        # kw.read_key_state (the documented reader) agrees with the change feed's last value.
        assert timeline["final_keyed_us"][device] == series[-1]
        assert timeline["final_lag_s"][device] == (
            timeline["final_global_ms"] * 1000 - series[-1]) / 1e6
    assert timeline["final_global_ms"] == epoch_ms(max(e.ts_ms for e in events)) - lateness_ms
    glob = [p["watermark_ms"] for p in timeline["global"]]
    assert glob == sorted(glob)
