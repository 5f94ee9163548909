"""Locating the bundled jar and reaching the Scala facade through py4j."""

from __future__ import annotations

import os
from typing import Any

from pyspark.errors import PySparkRuntimeError, PySparkTypeError
from pyspark.sql import DataFrame, SparkSession

_ENTRY = "io.github.keyedwatermarks.python.PythonAPI"
ROCKSDB_PROVIDER = (
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
)


def jar_path() -> str:
    """Absolute path of the keyed-watermarks jar bundled in this package."""
    jars_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars")
    jars = sorted(
        f for f in os.listdir(jars_dir) if f.endswith(".jar")
    ) if os.path.isdir(jars_dir) else []
    if not jars:
        raise PySparkRuntimeError(
            message=(
                f"no keyed-watermarks jar in {jars_dir}: build it with `dev/setup` "
                "or install the keyed-watermarks wheel"
            )
        )
    return os.path.join(jars_dir, jars[-1])


def is_connect(spark: Any) -> bool:
    try:
        from pyspark.sql.utils import is_remote

        if is_remote():
            return True
    except ImportError:  # pragma: no cover - older pyspark
        pass
    return type(spark).__module__.startswith("pyspark.sql.connect")


def python_api(df: DataFrame) -> Any:
    """The JVM entry point ``io.github.keyedwatermarks.python.PythonAPI`` of a classic session,
    after checking that the session has the keyed-watermarks jar."""
    jvm = df.sparkSession.sparkContext._jvm
    try:
        jvm.java.lang.Class.forName(_ENTRY, True, jvm.Thread.currentThread().getContextClassLoader())
    except Exception as e:  # py4j raises Py4JJavaError (ClassNotFoundException)
        raise PySparkRuntimeError(
            message=(
                "the keyed-watermarks jar is not on this SparkSession's classpath; create the "
                "session with keyed_watermarks.configure(SparkSession.builder).getOrCreate() "
                f"(or pass --jars {_safe_jar_path()}) before any other SparkSession starts"
            )
        ) from e
    return getattr(jvm, _ENTRY)


def _safe_jar_path() -> str:
    try:
        return jar_path()
    except PySparkRuntimeError:
        return "<keyed-watermarks jar>"


def configure(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Adds the bundled jar and the RocksDB state store provider to a session builder.

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
    existing = [j for j in str(options.get("spark.jars", "")).split(",") if j]
    if jar not in existing:
        existing.append(jar)
    builder = builder.config("spark.jars", ",".join(existing)).config(
        "spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER
    )
    return _with_connect_plugin(builder)


def _with_connect_plugin(builder: SparkSession.Builder) -> SparkSession.Builder:
    """Registers the Spark Connect plugin, for the Connect server that
    ``builder.remote("local[...]")`` starts in this process (harmless on a classic session,
    ignored by a remote ``sc://`` server, which needs it in its own configuration)."""
    from keyed_watermarks.connect import PLUGIN_CLASS, PLUGIN_CONF

    options = getattr(builder, "_options", {})
    plugins = [c for c in str(options.get(PLUGIN_CONF, "")).split(",") if c]
    if PLUGIN_CLASS not in plugins:
        plugins.append(PLUGIN_CLASS)
    return builder.config(PLUGIN_CONF, ",".join(plugins))
