"""The `tws_floor` method: the least a JVM `transformWithState` query does per key (one value per
key, one row per key per batch; benchmarks/jmh/.../bench/TwsFloor.scala), so ours / floor says how
much of our time is ours and how much is Spark's stateful machinery (shuffle, sort, state store,
commit). Its class lives in the JMH project's jar, not in the library: `./dev/sbt jmh/package`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pyspark.sql import DataFrame

ROOT = Path(__file__).resolve().parent.parent.parent
BUILD_HINT = "build it with ./dev/sbt jmh/package"


def floor_jar() -> Optional[Path]:
    """The JMH project's jar (holds bench.TwsFloor), or None if it was not built."""
    jars = sorted((ROOT / "benchmarks" / "jmh" / "target" / "scala-2.13").glob("keyed-watermarks-jmh_2.13-*.jar"))
    return jars[-1] if jars else None


def floor_frame(events: DataFrame) -> DataFrame:
    jvm = events.sparkSession.sparkContext._jvm
    jdf = jvm.io.github.keyedwatermarks.bench.TwsFloor.apply(events._jdf, "device")
    return DataFrame(jdf, events.sparkSession)
