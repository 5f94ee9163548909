"""The wheel is self-contained: built from python/, it bundles one jar per supported Spark
minor version, and installed alone in a fresh virtual environment it picks the jar of the
pyspark there and runs a keyed query. dev/test runs this module with every supported pyspark
(the venv of each Spark line, see dev/venv).

pyspark (about 400 MB) is not reinstalled: the fresh venv sees the site-packages of the venv
running the tests (so its pyspark) through a .pth file. A path added by a .pth line is put on sys.path without
processing the .pth files inside it, so the project's editable install of keyed_watermarks
stays invisible and the import must come from the wheel (the subprocess checks this).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

# Every Spark line: dev/test runs this module in the venv of each.
pytestmark = [pytest.mark.all_versions, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
PYTHON_DIR = ROOT / "python"


def _run(cmd, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if not list((PYTHON_DIR / "keyed_watermarks" / "jars").glob("*.jar")):
        pytest.fail("no jar in python/keyed_watermarks/jars: run dev/setup first")
    # dev/test builds the wheel once per run, in the first line's venv, and the other lines
    # install that same wheel (KW_TEST_WHEEL_DIR, emptied by dev/test when it starts): the build
    # does not depend on the running pyspark; installing and running it does.
    shared = os.environ.get("KW_TEST_WHEEL_DIR")
    if shared and list(Path(shared).glob("keyed_watermarks-*.whl")):
        (whl,) = Path(shared).glob("keyed_watermarks-*.whl")
        return whl
    tmp = tmp_path_factory.mktemp("wheel")
    # Build from a copy so that nothing (build/, egg-info) is written into python/.
    src = tmp / "src"
    shutil.copytree(
        PYTHON_DIR, src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    )
    out = tmp / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(src)], timeout=300)
    (whl,) = out.glob("keyed_watermarks-*.whl")
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        whl = Path(shutil.copy(whl, Path(shared) / whl.name))
    return whl


def test_wheel_bundles_a_jar_per_spark_line(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    jars = [n for n in names if n.startswith("keyed_watermarks/jars/") and n.endswith(".jar")]
    version = (PYTHON_DIR / "keyed_watermarks" / "VERSION").read_text().strip()
    # One jar per supported Spark minor version, each named after it and the release.
    lines = sorted(re.fullmatch(rf"keyed-watermarks-spark(\d+\.\d+)_2\.13-{re.escape(version)}\.jar",
                                Path(j).name).group(1) for j in jars)
    assert lines == ["4.0", "4.1", "4.2", "4.3"], jars
    assert "keyed_watermarks/py.typed" in names
    for module in ("__init__", "_jvm", "_versions", "keyed"):
        assert f"keyed_watermarks/{module}.py" in names
    # The bundled jars are the ones the package ships (same bytes).
    for jar in jars:
        assert zipfile.ZipFile(wheel).read(jar) == (PYTHON_DIR / jar).read_bytes(), jar
    # Installable next to any supported pyspark; the version is the VERSION file's.
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    fields = zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
    assert f"Version: {version}" in fields
    requires = [f for f in fields if f.startswith("Requires-Dist: pyspark")]
    assert requires in (["Requires-Dist: pyspark<4.4,>=4.0"], ["Requires-Dist: pyspark>=4.0,<4.4"]), requires


_QUERY = textwrap.dedent(
    """
    import datetime, os, sys, tempfile
    from pathlib import Path

    import keyed_watermarks as kw
    from pyspark.sql import SparkSession, functions as F

    import pyspark

    venv = Path(sys.prefix).resolve()
    assert Path(kw.__file__).resolve().is_relative_to(venv), kw.__file__
    assert Path(kw.jar_path()).resolve().is_relative_to(venv), kw.jar_path()
    # The jar of the installed pyspark's minor version ...
    minor = ".".join(pyspark.__version__.split(".")[:2])
    assert Path(kw.jar_path()).name.startswith(f"keyed-watermarks-spark{minor}_2.13-"), kw.jar_path()

    work = Path(sys.argv[1])
    spark = kw.configure(
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.sql.session.timeZone", "UTC")
    ).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # ... which is the JVM's Spark version, what jar_path() goes by once a session runs.
    assert spark.version.startswith(minor + "."), (spark.version, minor)
    assert Path(kw.jar_path()).name.startswith(f"keyed-watermarks-spark{minor}_2.13-"), kw.jar_path()

    # Two files, one micro-batch each (maxFilesPerTrigger=1, ordered by modification time).
    inp = work / "input"
    inp.mkdir()
    batches = [
        ["a,2024-01-01 00:00:01,1.0", "a,2024-01-01 00:00:04,3.0", "b,2024-01-01 00:00:02,5.0"],
        ["a,2024-01-01 00:00:12,2.0", "a,2024-01-01 00:00:27,2.0", "b,2024-01-01 00:00:19,1.0"],
    ]
    for i, lines in enumerate(batches):
        f = inp / f"batch-{i}.csv"
        f.write_text("\\n".join(lines) + "\\n")
        os.utime(f, (1_000_000 + i, 1_000_000 + i))
    events = (spark.readStream.schema("device STRING, ts TIMESTAMP, temp DOUBLE")
              .option("maxFilesPerTrigger", 1).csv(str(inp)))
    result = (kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds")
              .window("10 seconds")
              .agg(F.count("*").alias("n"), F.sum("temp").alias("total")))
    query = (result.writeStream.format("parquet").outputMode("append")
             .option("path", str(work / "out"))
             .option("checkpointLocation", str(work / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    rows = sorted((r.device, r.window.start.second, r.n, r.total)
                  for r in spark.read.parquet(str(work / "out")).collect())
    print("ROWS", rows)
    spark.stop()
    """
)


def test_wheel_installs_and_runs_in_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    venv_python = venv / "bin" / "python"
    # The project's pip installs into the new venv (faster than bootstrapping pip there).
    _run(
        [sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--no-deps", "--no-index", str(wheel)],
        timeout=300,
    )
    purelib = _run(
        [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    # pyspark and py4j from the venv running the tests, without reinstalling them.
    project_site = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "zz_project_site_packages.pth").write_text(project_site + "\n")
    assert (Path(purelib) / "keyed_watermarks" / "jars").is_dir()

    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS", "VIRTUAL_ENV")}
    proc = _run([str(venv_python), "-c", _QUERY, str(work)], cwd=work, env=env, timeout=300)
    (line,) = [out for out in proc.stdout.splitlines() if out.startswith("ROWS ")]
    rows = ast.literal_eval(line[len("ROWS "):])
    # a: wm = 27 - 5 = 22 s closes [0,10) (1 s, 4 s) and [10,20) (12 s); [20,30) stays open.
    # b: wm = 19 - 5 = 14 s closes [0,10) (2 s); [10,20) stays open.
    assert rows == [("a", 0, 2, 4.0), ("a", 10, 1, 2.0), ("b", 0, 1, 5.0)]
