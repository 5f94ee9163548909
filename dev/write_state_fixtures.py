"""Writes the checkpoint fixtures of this release: tests/fixtures/state/<release>/<kind>/.

Usage: .venv/bin/python dev/write_state_fixtures.py [--force] [--kind KIND]...

Each query of tests/state_queries.py (one kind of state each) runs over the first FIXTURE_FILES
input files (one micro-batch each); its checkpoint is kept with the absolute paths in its
text files (the file source's log, Spark's operator metadata) replaced by placeholders, which
tests/test_state_fixtures.py puts back. manifest.json records the release, the Spark version,
how many of how many input files were processed and the window rows emitted so far. A later
release adds its own directory with this script and keeps every earlier one: the test resumes
each with the current code (docs/semantics.md, "Upgrades"). Run it once per release, on the
main line (.venv), with the jar of that release built (dev/setup). ``--kind`` writes only the
named kinds into the release's existing directory (a kind added within the release), keeping
the others and their manifest entries.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import state_queries as sq  # noqa: E402

FIXTURE_FILES = 3  # processed before the checkpoint is kept
TOTAL_FILES = 6  # the test resumes over the rest
CHECKPOINT_TOKEN = "@CHECKPOINT@"
INPUT_TOKEN = "@INPUT@"


def placeholders(checkpoint: Path, input_dir: Path) -> None:
    """Replaces the absolute paths in the checkpoint's text files by placeholders; fails if a
    binary file holds one (it could not be moved then)."""
    for f in checkpoint.rglob("*"):
        if not f.is_file():
            continue
        data = f.read_bytes()
        if str(checkpoint).encode() not in data and str(input_dir).encode() not in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise SystemExit(f"{f}: a binary file names an absolute path; the fixture cannot move")
        f.write_text(text.replace(str(checkpoint), CHECKPOINT_TOKEN).replace(str(input_dir), INPUT_TOKEN))


def main() -> int:
    import pyspark

    import keyed_watermarks as kw

    target = ROOT / "tests" / "fixtures" / "state" / kw.__version__
    args = sys.argv[1:]
    only = [args[i + 1] for i, a in enumerate(args) if a == "--kind" and i + 1 < len(args)]
    unknown = sorted(set(only) - set(sq.KINDS))
    if unknown:
        print(f"unknown kind(s) {unknown}; expected some of {list(sq.KINDS)}", file=sys.stderr)
        return 2
    emitted = {}
    if only:
        if not (target / "manifest.json").exists():
            print(f"--kind adds to {target.relative_to(ROOT)}, which has no manifest yet", file=sys.stderr)
            return 1
        emitted = json.loads((target / "manifest.json").read_text())["emitted_windows"]
        for kind in only:
            if (target / kind).exists() and "--force" not in args:
                print(f"{(target / kind).relative_to(ROOT)} exists (--force rewrites it)", file=sys.stderr)
                return 1
            shutil.rmtree(target / kind, ignore_errors=True)
    elif target.exists():
        if "--force" not in args:
            print(f"{target.relative_to(ROOT)} exists (--force rewrites it)", file=sys.stderr)
            return 1
        shutil.rmtree(target)
    spark = sq.session()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        input_dir = work / "input"
        sq.write_files(spark, sq.make_files(TOTAL_FILES)[:FIXTURE_FILES], input_dir)
        for kind in only or sq.KINDS:
            checkpoint = work / "ckpt" / kind
            out = work / "out" / kind
            sq.run(spark, kind, input_dir, checkpoint, out)
            emitted[kind] = sq.window_rows(spark, out)
            placeholders(checkpoint, input_dir)
            shutil.copytree(checkpoint, target / kind)
    spark.stop()
    manifest = {
        "release": kw.__version__,
        "spark": pyspark.__version__,
        "files_processed": FIXTURE_FILES,
        "total_files": TOTAL_FILES,
        "emitted_windows": emitted,
    }
    (target / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    print(f"wrote {target.relative_to(ROOT)}: {len(only or sq.KINDS)} checkpoints, {size} bytes in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
