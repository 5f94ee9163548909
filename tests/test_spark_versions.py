"""One wheel for Spark 4.0-4.3: the bundled jar of the running Spark's minor version is
chosen, unsupported versions are refused before anything starts, and a jar built for another
Spark line refuses to run instead of failing mid-query."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark
import pytest
from pyspark.errors import PySparkRuntimeError

import keyed_watermarks as kw

SUPPORTED = "Spark 4.0, 4.1, 4.2 and 4.3"


@pytest.mark.all_versions
@pytest.mark.parametrize("version", ["4.0.0", "4.0.5", "4.1.1", "4.2.0", "4.2.1", "4.3.0", "4.3.1-SNAPSHOT"])
def test_each_supported_version_gets_the_jar_of_its_line(version):
    jar = Path(kw.jar_path(version))
    minor = ".".join(version.split(".")[:2])
    assert jar.is_file(), jar
    assert jar.name == f"keyed-watermarks-spark{minor}_2.13-{kw.__version__}.jar"


@pytest.mark.all_versions
def test_default_jar_is_the_running_sparks(spark):
    # With a session running, the JVM's own version decides; it is the installed pyspark's.
    minor = ".".join(spark.version.split(".")[:2])
    assert pyspark.__version__.startswith(minor + ".")
    assert Path(kw.jar_path()).name.startswith(f"keyed-watermarks-spark{minor}_2.13-")
    assert kw.jar_path() in spark.conf.get("spark.jars").split(",")


@pytest.mark.parametrize("version", ["3.5.1", "3.4.4"])
def test_spark_3_is_refused_naming_the_supported_versions(version):
    with pytest.raises(PySparkRuntimeError, match="transformWithState") as e:
        kw.jar_path(version)
    assert SUPPORTED in str(e.value) and f"this is Spark {version}" in str(e.value)


@pytest.mark.parametrize("version", ["4.4.0", "5.0.0", "not a version"])
def test_newer_or_unknown_spark_is_refused_naming_the_supported_versions(version):
    with pytest.raises(PySparkRuntimeError, match=f"supports {SUPPORTED}.*this is Spark {version}"):
        kw.jar_path(version)


def test_configure_replaces_another_lines_jar(spark):
    # A jar of another Spark line already in spark.jars would shadow the right one.
    other = kw.jar_path("4.0.0" if not pyspark.__version__.startswith("4.0.") else "4.1.0")
    builder = pyspark.sql.SparkSession.builder.config("spark.jars", f"/opt/other.jar,{other}")
    jars = kw.configure(builder)._options["spark.jars"].split(",")
    assert jars == ["/opt/other.jar", kw.jar_path()]


_UNSUPPORTED_PYSPARK = textwrap.dedent(
    """
    import pyspark
    pyspark.__version__ = "3.5.1"  # what an installed pyspark 3.5.1 reports
    import keyed_watermarks
    """
)


def test_import_refuses_an_unsupported_pyspark():
    proc = subprocess.run([sys.executable, "-c", _UNSUPPORTED_PYSPARK], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "PySparkRuntimeError" in proc.stderr and SUPPORTED in proc.stderr, proc.stderr[-2000:]


_WRONG_JAR = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    import keyed_watermarks as kw

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.jars", sys.argv[1]).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    events = spark.readStream.format("rate").load()
    try:
        kw.keyed_watermark(events, key="value", event_time="timestamp", lateness="5 seconds")
    finally:
        assert spark.streams.active == []
        spark.stop()
    """
)


@pytest.mark.slow
def test_jar_of_another_spark_line_refuses_to_run(tmp_path):
    # A Scala job (or --jars by hand) with the jar of another Spark line: the facade checks
    # org.apache.spark.SPARK_VERSION before anything is planned.
    running = ".".join(pyspark.__version__.split(".")[:2])
    other = "4.2" if running != "4.2" else "4.3"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR")}
    proc = subprocess.run([sys.executable, "-c", _WRONG_JAR, kw.jar_path(other + ".0")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    assert (f"this keyed-watermarks jar is built for Spark {other}, but this is Spark {pyspark.__version__}"
            in proc.stderr), proc.stderr[-3000:]
    assert f"keyed-watermarks-spark{running}_2.13-" in proc.stderr
