"""The wheel is self-contained: built from python/, it bundles one jar per supported Spark
minor version, and installed alone in a fresh virtual environment it picks the jar of the
pyspark there and runs a keyed query. dev/test runs this module with every supported pyspark
(the venv of each Spark line, see dev/venv).

The release (`./dev/release`, CONTRIBUTING.md "Releasing"), on the main line: its wheel installed
by the fresh venv's own pip from a scratch directory (no sbt, no source tree) runs the same
query; its Maven layout has every line's jar, sources, Scaladoc and POM with valid checksums.

pyspark (about 400 MB) is not reinstalled: the fresh venv sees the site-packages of the venv
running the tests (so its pyspark) through a .pth file. A path added by a .pth line is put on sys.path without
processing the .pth files inside it, so the project's editable install of keyed_watermarks
stays invisible and the import must come from the wheel (the subprocess checks this).
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from support import short_lived_jvm_env

# Every Spark line: dev/test runs this module's wheel tests in the venv of each.
pytestmark = [pytest.mark.slow]

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


@pytest.mark.all_versions
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


def _install_and_run(wheel: Path, tmp_path: Path, own_pip: bool) -> None:
    """Installs `wheel` alone into a fresh venv and runs _QUERY there, from a scratch directory.
    own_pip: with the venv's own pip (ensurepip, as a user would); else the project's pip
    installs into it (faster)."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", *([] if own_pip else ["--without-pip"]), str(venv)], timeout=300)
    venv_python = venv / "bin" / "python"
    pip = [str(venv_python), "-m", "pip"] if own_pip else [sys.executable, "-m", "pip", "--python", str(venv_python)]
    _run([*pip, "install", "--no-deps", "--no-index", str(wheel)], timeout=300, cwd=tmp_path)
    purelib = _run(
        [str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
    ).stdout.strip()
    # pyspark and py4j from the venv running the tests, without reinstalling them.
    project_site = sysconfig.get_paths()["purelib"]
    (Path(purelib) / "zz_project_site_packages.pth").write_text(project_site + "\n")
    assert (Path(purelib) / "keyed_watermarks" / "jars").is_dir()

    work = tmp_path / "work"
    work.mkdir()
    env = short_lived_jvm_env({k: v for k, v in os.environ.items()
                               if k not in ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS", "VIRTUAL_ENV")})
    proc = _run([str(venv_python), "-c", _QUERY, str(work)], cwd=work, env=env, timeout=900)
    (line,) = [out for out in proc.stdout.splitlines() if out.startswith("ROWS ")]
    rows = ast.literal_eval(line[len("ROWS "):])
    # a: wm = 27 - 5 = 22 s closes [0,10) (1 s, 4 s) and [10,20) (12 s); [20,30) stays open.
    # b: wm = 19 - 5 = 14 s closes [0,10) (2 s); [10,20) stays open.
    assert rows == [("a", 0, 2, 4.0), ("a", 10, 1, 2.0), ("b", 0, 1, 5.0)]


@pytest.mark.all_versions
def test_wheel_installs_and_runs_in_fresh_venv(wheel, tmp_path):
    # A fresh venv and a Spark start-up (about 30 s on the 2-core CI machine) per line, for a
    # check whose only per-line part is which jar the package loads: test_spark_versions checks
    # that on every line, test_wheel_bundles_a_jar_per_spark_line that the wheel carries every
    # jar. So the install runs on the oldest line here, and on the main line as the release's
    # wheel (test_release_wheel_installs_with_plain_pip_and_runs, with the venv's own pip).
    import pyspark

    line = ".".join(pyspark.__version__.split(".")[:2])
    if line != LINES[0]:
        pytest.skip(f"the wheel's fresh-venv install runs on Spark {LINES[0]} and, as the release's "
                    f"wheel, on {LINES[-1]}; this is {line}")
    _install_and_run(wheel, tmp_path, own_pip=False)


# --------------------------------------------------------------------------------------
# The release (dev/release)
# --------------------------------------------------------------------------------------

RELEASE = ROOT / "build" / "release"
LINES = ["4.0", "4.1", "4.2", "4.3"]


def _release_is_current(version: str) -> bool:
    """build/release holds this version, built from the jars the package has now."""
    wheels = list((RELEASE / "python").glob(f"keyed_watermarks-{version}-*.whl"))
    if len(wheels) != 1:
        return False
    names = zipfile.ZipFile(wheels[0]).namelist()
    for jar in (PYTHON_DIR / "keyed_watermarks" / "jars").glob("*.jar"):
        name = f"keyed_watermarks/jars/{jar.name}"
        if name not in names or zipfile.ZipFile(wheels[0]).read(name) != jar.read_bytes():
            return False
    return True


@pytest.fixture(scope="module")
def release() -> Path:
    """build/release, reused when current (KW_REUSE_RELEASE=0 forces a new one), else built by
    ./dev/release (sbt: a few minutes)."""
    version = (PYTHON_DIR / "keyed_watermarks" / "VERSION").read_text().strip()
    if os.environ.get("KW_REUSE_RELEASE", "1") == "0" or not _release_is_current(version):
        _run([str(ROOT / "dev" / "release")], cwd=ROOT, timeout=3600)
    return RELEASE


def test_release_maven_layout_and_checksums(release):
    version = (PYTHON_DIR / "keyed_watermarks" / "VERSION").read_text().strip()
    for line in LINES:
        artifact = f"keyed-watermarks-spark{line}_2.13"
        d = release / "maven" / "io" / "github" / "keyedwatermarks" / artifact / version
        files = {f"{artifact}-{version}{s}" for s in (".jar", "-sources.jar", "-javadoc.jar", ".pom")}
        present = {p.name for p in d.iterdir()}
        for f in files:
            assert f in present and f + ".md5" in present and f + ".sha1" in present, (f, sorted(present))
            data = (d / f).read_bytes()
            assert (d / (f + ".md5")).read_text().split()[0] == hashlib.md5(data).hexdigest(), f
            assert (d / (f + ".sha1")).read_text().split()[0] == hashlib.sha1(data).hexdigest(), f
        # The jar is the wheel's (same bytes); the sources and the Scaladoc are what they say.
        jar = (d / f"{artifact}-{version}.jar").read_bytes()
        assert jar == (PYTHON_DIR / "keyed_watermarks" / "jars" / f"{artifact}-{version}.jar").read_bytes()
        sources = zipfile.ZipFile(d / f"{artifact}-{version}-sources.jar").namelist()
        assert "io/github/keyedwatermarks/KeyedWatermarks.scala" in sources
        assert "index.html" in zipfile.ZipFile(d / f"{artifact}-{version}-javadoc.jar").namelist()
        # The POM: these coordinates, Spark `provided` (never pulled in by a user's build).
        pom = ET.parse(d / f"{artifact}-{version}.pom").getroot()
        ns = {"m": pom.tag[1:].split("}")[0]}  # the POM's XML namespace, as the file declares it
        assert [pom.findtext(f"m:{t}", namespaces=ns) for t in ("groupId", "artifactId", "version")] == [
            "io.github.keyedwatermarks", artifact, version]
        deps = {dep.findtext("m:artifactId", namespaces=ns): dep.findtext("m:scope", namespaces=ns)
                for dep in pom.iterfind("m:dependencies/m:dependency", ns)}
        assert deps.get("spark-sql_2.13") == "provided", deps
        assert all(scope in ("provided", "test") for a, scope in deps.items() if a.startswith("spark-")), deps
    # The Python distributions, with their checksums; the sdist carries the jars too.
    wheel = release / "python" / f"keyed_watermarks-{version}-py3-none-any.whl"
    sdist = release / "python" / f"keyed_watermarks-{version}.tar.gz"
    for f in (wheel, sdist):
        digest, name = (f.parent / (f.name + ".sha256")).read_text().split()
        assert (digest, name) == (hashlib.sha256(f.read_bytes()).hexdigest(), f.name)
    with tarfile.open(sdist) as tar:
        jars = sorted(Path(n).name for n in tar.getnames() if n.endswith(".jar"))
    assert jars == [f"keyed-watermarks-spark{line}_2.13-{version}.jar" for line in LINES], jars


def test_release_wheel_installs_with_plain_pip_and_runs(release, tmp_path):
    version = (PYTHON_DIR / "keyed_watermarks" / "VERSION").read_text().strip()
    _install_and_run(release / "python" / f"keyed_watermarks-{version}-py3-none-any.whl", tmp_path, own_pip=True)
