"""Locating the bundled jar and reaching the Scala facade through py4j."""

from __future__ import annotations

import os
from typing import Any, Optional

import pyspark
from pyspark.errors import PySparkRuntimeError, PySparkTypeError
from pyspark.sql import DataFrame, SparkSession

from keyed_watermarks import _contract, _versions

_ENTRY = _contract.PYTHON_API_CLASS
EXTENSIONS = _contract.EXTENSIONS_CLASS
ROCKSDB_PROVIDER = (
    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
)


def jar_path(spark_version: Optional[str] = None) -> str:
    """Absolute path of the bundled keyed-watermarks jar built for a Spark version.

    :param spark_version: a Spark version such as ``"4.0.2"`` (default: the running Spark's).
    :returns: the jar's absolute path.

    By default the version of the Spark this process runs: the JVM's own ``spark.version``
    when a SparkContext is active (attached to an existing session), else the installed
    ``pyspark.__version__``. Unsupported versions fail with a PySparkRuntimeError naming the
    supported ones.

    >>> import os
    >>> os.path.basename(kw.jar_path("4.0.2")).startswith("keyed-watermarks-spark4.0_2.13-")
    True
    >>> kw.jar_path("3.5.1")
    Traceback (most recent call last):
        ...
    pyspark.errors.exceptions.base.PySparkRuntimeError: ...
    """
    if spark_version is None:
        spark_version = _versions.running_spark_version() or pyspark.__version__
    return _versions.jar_for(spark_version)


def is_connect(spark: Any) -> bool:
    from pyspark.sql.utils import is_remote

    if is_remote():
        return True
    return type(spark).__module__.startswith("pyspark.sql.connect")


def python_api(df: DataFrame) -> Any:
    """The JVM entry point ``io.github.keyedwatermarks.python.PythonAPI`` of a classic session,
    after checking that the session has the keyed-watermarks jar."""
    jvm: Any = df.sparkSession.sparkContext._jvm  # py4j's JVMView (Optional in pyspark's hints)
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
    """Adds the bundled jar for the running Spark (the JVM's Spark if a SparkContext is already
    active, else the installed pyspark's; see :func:`jar_path`), its planner extension, its
    Spark Connect plugin and the RocksDB state store provider to a session builder (classic,
    or a local Connect ``remote("local[2]")``).

    :param builder: ``SparkSession.builder`` (classic, or ``.remote("local[...]")``), before
        ``getOrCreate()``.
    :returns: the same builder, configured.

    >>> from pyspark.sql import SparkSession
    >>> import keyed_watermarks as kw
    >>> spark = kw.configure(SparkSession.builder.master("local[2]")).getOrCreate()
    >>> spark.conf.get("spark.sql.streaming.stateStore.providerClass")
    'org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider'
    """
    if not isinstance(builder, SparkSession.Builder):
        raise PySparkTypeError(
            message=f"configure expects SparkSession.builder, got {type(builder).__name__}"
        )
    from keyed_watermarks.connect import PLUGIN_CLASS, PLUGIN_CONF

    # Another version's keyed-watermarks jar on the same classpath would shadow this one.
    options = getattr(builder, "_options", {})
    jars = [j for j in str(options.get("spark.jars", "")).split(",")
            if j and not _versions.is_bundled_jar_name(os.path.basename(j))]
    builder = builder.config("spark.jars", ",".join(jars + [jar_path()]))
    builder = _append_conf(builder, "spark.sql.extensions", EXTENSIONS)
    # The Spark Connect plugin, for the Connect server that ``builder.remote("local[...]")``
    # starts in this process (harmless on a classic session; a remote ``sc://`` server needs
    # it in its own configuration).
    builder = _append_conf(builder, PLUGIN_CONF, PLUGIN_CLASS)
    return builder.config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)


def _append_conf(builder: SparkSession.Builder, key: str, value: str) -> SparkSession.Builder:
    """Adds ``value`` to a comma-separated setting, keeping what the builder already has."""
    values = [v for v in str(getattr(builder, "_options", {}).get(key, "")).split(",") if v]
    if value not in values:
        values.append(value)
    return builder.config(key, ",".join(values))
