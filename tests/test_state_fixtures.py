"""keyed-watermarks upgrades keep state (docs/semantics.md, "Upgrades"): every checkpoint fixture
in tests/fixtures/state/<release>/ (written by that release with dev/write_state_fixtures.py)
resumes with the current code, which emits exactly the windows an uninterrupted run emits after
the ones the fixture's run already emitted."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

import state_queries as sq

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "state"
#: The keyed stage's record beside its state (state.StageRecord).
RECORD = "_keyed_watermarks.json"
CASES = sorted((d.name, kind) for d in FIXTURES.iterdir() if d.is_dir()
               for kind in json.loads((d / "manifest.json").read_text())["emitted_windows"])


def test_there_are_fixtures_of_every_kind():
    assert {kind for _, kind in CASES} == set(sq.KINDS)


def restore(fixture: Path, checkpoint: Path, input_dir: Path) -> None:
    """The fixture's checkpoint at `checkpoint`, its placeholders replaced by real paths."""
    shutil.copytree(fixture, checkpoint)
    for f in checkpoint.rglob("*"):
        if f.is_file() and f.suffix not in (".zip", ".sst", ".changelog"):
            try:
                text = f.read_text()
            except UnicodeDecodeError:
                continue
            if "@CHECKPOINT@" in text or "@INPUT@" in text:
                f.write_text(text.replace("@CHECKPOINT@", str(checkpoint)).replace("@INPUT@", str(input_dir)))


@pytest.fixture(scope="module")
def inputs(spark, tmp_path_factory):
    """The fixtures' input files, and each kind's windows of an uninterrupted run over them."""
    root = tmp_path_factory.mktemp("state-fixtures")
    totals = {json.loads((d / "manifest.json").read_text())["total_files"]
              for d in FIXTURES.iterdir() if d.is_dir()}
    (total,) = totals
    input_dir = root / "input"
    sq.write_files(spark, sq.make_files(total), input_dir)
    full = {}

    def uninterrupted(kind: str) -> Counter:
        if kind not in full:
            sq.run(spark, kind, input_dir, root / "full" / "ckpt" / kind, root / "full" / "out" / kind)
            full[kind] = Counter(sq.window_rows(spark, root / "full" / "out" / kind))
        return full[kind]
    return input_dir, uninterrupted


@pytest.mark.parametrize("release,kind", CASES)
def test_a_fixture_resumes_with_the_remaining_windows(spark, workdir, inputs, release, kind):
    input_dir, uninterrupted = inputs
    full = {kind: uninterrupted(kind)}
    fixture = FIXTURES / release
    manifest = json.loads((fixture / "manifest.json").read_text())
    before = Counter(tuple(r) for r in manifest["emitted_windows"][kind])
    assert before and before <= full[kind], "the fixture's run emitted what an uninterrupted run does"
    checkpoint, out = workdir / "ckpt", workdir / "out"
    restore(fixture / kind, checkpoint, input_dir)
    had_record = (checkpoint / "state" / "0" / RECORD).exists()
    sq.run(spark, kind, input_dir, checkpoint, out)
    after = Counter(sq.window_rows(spark, out))
    assert after, "windows emitted after the resume"
    assert after == full[kind] - before
    # A checkpoint written before the keyed stage's record existed resumes (above) and gets one,
    # for the batch the resume planned first (docs/semantics.md, "Upgrades").
    record = json.loads((checkpoint / "state" / "0" / RECORD).read_text())
    if not had_record:
        assert record["batch"] == 1 + max(int(c.name) for c in (fixture / kind / "commits").glob("[0-9]*"))
