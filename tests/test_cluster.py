"""On a cluster topology: Spark's ``local-cluster[2,1,1024]`` (a master, two workers, one
executor JVM each) gives the same results as ``local[2]`` for tumbling, sliding and session
windows, a timer policy and a restart from the checkpoint. So the operator's classes and plan
serialize to executors in other JVMs, and the jar reaches them through ``kw.configure``.

The cluster run is a subprocess of tests/cluster_queries.py (one JVM holds one SparkContext); the
local[2] run is the same queries over the same input files in the suite's own local[2] session
(cluster_queries.run_all: one JVM start fewer). local-cluster launches executors with
``SPARK_HOME/bin``: the pyspark package is a Spark home.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyspark
import pytest

import cluster_queries
from support import short_lived_jvm_env

pytestmark = pytest.mark.slow  # its own processes (see pytest.ini)

HERE = Path(__file__).resolve().parent


def run_queries(master: str, work: Path) -> str:
    # The driver at the first JIT tier, and the executors too (they inherit the workers' environment).
    env = short_lived_jvm_env(dict(os.environ, SPARK_HOME=os.path.dirname(pyspark.__file__)))
    proc = subprocess.run([sys.executable, str(HERE / "cluster_queries.py"), master, str(work)],
                          capture_output=True, text=True, timeout=1200, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def rows(spark, directory: Path) -> Counter:
    df = spark.read.parquet(str(directory))
    return Counter(tuple(tuple(v) if isinstance(v, (list, tuple)) else v for v in r) for r in df.collect())


def test_local_cluster_equals_local(spark, tmp_path):
    assert spark.sparkContext.master == "local[2]"
    cluster_queries.run_all(spark, "local", tmp_path)  # writes the input files the cluster reads
    cluster_out = run_queries("local-cluster[2,1,1024]", tmp_path)
    assert "EXECUTORS 2" in cluster_out, cluster_out
    for name in ("tumbling", "sliding", "session", "timers", "restart"):
        local, cluster = rows(spark, tmp_path / "local" / name), rows(spark, tmp_path / "cluster" / name)
        assert cluster == local, name
        assert sum(local.values()) >= 10, f"{name}: too few rows to compare"
