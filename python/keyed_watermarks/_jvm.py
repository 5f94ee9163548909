"""Locating the bundled jar and reaching the Scala facade through py4j."""

from __future__ import annotations

import os
from typing import Any, Optional

import pyspark
from pyspark.errors import PySparkRuntimeError, PySparkTypeError
from pyspark.sql import DataFrame, SparkSession

from keyed_watermarks import _versions

_FACADE = "io.github.keyedwatermarks.KeyedWatermarks"
ROCKSDB_PROVIDER = (
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
)


def jar_path(spark_version: Optional[str] = None) -> str:
    """Absolute path of the bundled keyed-watermarks jar built for a Spark version.

    By default the version of the Spark this process runs: the JVM's own ``spark.version``
    when a SparkContext is active (attached to an existing session), else the installed
    ``pyspark.__version__``. Unsupported versions fail with a PySparkRuntimeError naming the
    supported ones.
    """
    if spark_version is None:
        spark_version = _versions.running_spark_version() or pyspark.__version__
    return _versions.jar_for(spark_version)


def is_connect(spark: Any) -> bool:
    try:
        from pyspark.sql.utils import is_remote

        if is_remote():
            return True
    except ImportError:  # pragma: no cover - older pyspark
        pass
    return type(spark).__module__.startswith("pyspark.sql.connect")


def facade(df: DataFrame) -> Any:
    """The JVM facade object, after checking the DataFrame's session can reach it."""
    if not isinstance(df, DataFrame) and not type(df).__name__ == "DataFrame":
        raise PySparkTypeError(
            message=f"events must be a pyspark DataFrame, got {type(df).__name__}"
        )
    spark = df.sparkSession
    if is_connect(spark):
        raise PySparkRuntimeError(
            message=(
                "keyed_watermarks runs its operator in the Spark driver's JVM and does not "
                "support Spark Connect sessions yet; use a classic SparkSession built with "
                "keyed_watermarks.configure(SparkSession.builder)"
            )
        )
    jvm = spark.sparkContext._jvm
    try:
        cls = jvm.java.lang.Class.forName(
            _FACADE, True, jvm.Thread.currentThread().getContextClassLoader()
        )
    except Exception as e:  # py4j raises Py4JJavaError (ClassNotFoundException)
        raise PySparkRuntimeError(
            message=(
                "the keyed-watermarks jar is not on this SparkSession's classpath; create the "
                "session with keyed_watermarks.configure(SparkSession.builder).getOrCreate() "
                f"(or pass --jars {_safe_jar_path()}) before any other SparkSession starts"
            )
        ) from e
    del cls
    return getattr(jvm, _FACADE)


def _safe_jar_path() -> str:
    try:
        return jar_path()
    except PySparkRuntimeError:
        return "<keyed-watermarks jar>"


def configure(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Adds the bundled jar for the running Spark and the RocksDB state store provider to a
    session builder (the jar of the JVM's Spark if a SparkContext is already active, else
    of the installed pyspark; see :func:`jar_path`).

    >>> from pyspark.sql import SparkSession
    >>> import keyed_watermarks as kw
    >>> spark = kw.configure(SparkSession.builder.master("local[2]")).getOrCreate()  # doctest: +SKIP
    """
    if not isinstance(builder, SparkSession.Builder):
        raise PySparkTypeError(
            message=f"configure expects SparkSession.builder, got {type(builder).__name__}"
        )
    jar = jar_path()
    options = getattr(builder, "_options", {})
    # Another version's keyed-watermarks jar on the same classpath would shadow this one.
    existing = [
        j for j in str(options.get("spark.jars", "")).split(",")
        if j and not _versions.is_bundled_jar_name(os.path.basename(j))
    ]
    existing.append(jar)
    return builder.config("spark.jars", ",".join(existing)).config(
        "spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER
    )
