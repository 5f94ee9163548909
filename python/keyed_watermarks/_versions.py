"""Which Spark versions keyed-watermarks runs on, and which bundled jar goes with each.

The operator uses Spark internals (Catalyst aggregate buffers, physical plan nodes) whose
signatures change between Spark minor versions but not between patch releases, so the wheel
bundles one jar per minor version, each compiled against that line:
``jars/keyed-watermarks-spark<minor>_2.13-<version>.jar``. Spark 3.5 and older have no
``transformWithState``, which the operator is built on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Dict, Optional

from keyed_watermarks._contract import SPARK_LINES

try:
    from pyspark.errors import PySparkRuntimeError as _VersionError
except ImportError:  # pyspark < 3.5: say which versions are supported all the same
    _VersionError = RuntimeError  # type: ignore[misc,assignment]

#: The Spark minor versions with a bundled jar (Scala 2.13, Java 17).
SUPPORTED_LINES = SPARK_LINES
SUPPORTED = f"Spark {', '.join(SPARK_LINES[:-1])} and {SPARK_LINES[-1]} (any patch release; Scala 2.13, Java 17)"

__version__ = Path(__file__).with_name("VERSION").read_text().strip()

_JAR_NAME = re.compile(r"^keyed-watermarks-spark(\d+\.\d+)_2\.13-.+\.jar$")
_JARS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jars")


def _error(message: str) -> Exception:
    if _VersionError is RuntimeError:
        return RuntimeError(message)
    return _VersionError(message=message)


def spark_line(spark_version: str) -> str:
    """The supported minor line of a Spark version ("4.1.4" -> "4.1"), or a clear error."""
    m = re.match(r"^\s*(\d+)\.(\d+)", str(spark_version))
    line = f"{m.group(1)}.{m.group(2)}" if m else None
    if line in SUPPORTED_LINES:
        return line
    why = ""
    if m and (int(m.group(1)), int(m.group(2))) < (4, 0):
        why = " (Spark 3.5 and older have no transformWithState, which keyed-watermarks runs on)"
    raise _error(
        f"keyed-watermarks supports {SUPPORTED}; this is Spark {spark_version}{why}. "
        f"Install a supported pyspark, e.g. pip install 'pyspark>=4.0,<4.4'"
    )


def require_supported_pyspark() -> None:
    """Refuses an unsupported installed pyspark before anything else is imported or started."""
    import pyspark

    spark_line(getattr(pyspark, "__version__", "unknown"))


def running_spark_version() -> Optional[str]:
    """The Spark version of this process's running JVM (None if no SparkContext is active).

    Attached to an existing session, the JVM's Spark is what counts: it may differ from the
    pyspark package (a Spark distribution's own python/ folder, a managed runtime).
    """
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return sc.version if sc is not None else None


def bundled_jars(jars_dir: str = _JARS_DIR) -> Dict[str, str]:
    """The bundled jars by Spark minor line."""
    if not os.path.isdir(jars_dir):
        return {}
    found: Dict[str, str] = {}
    for name in sorted(os.listdir(jars_dir)):
        m = _JAR_NAME.match(name)
        if m:
            found[m.group(1)] = os.path.join(jars_dir, name)
    return found


def jar_for(spark_version: str, jars_dir: str = _JARS_DIR) -> str:
    """The bundled jar compiled for `spark_version`'s minor line."""
    line = spark_line(spark_version)
    jars = bundled_jars(jars_dir)
    if line not in jars:
        built = ", ".join(sorted(jars)) or "none"
        raise _error(
            f"no keyed-watermarks jar for Spark {line} in {jars_dir} (jars there: {built}): "
            "build them with `dev/setup` or install the keyed-watermarks wheel"
        )
    return jars[line]


def is_bundled_jar_name(file_name: str) -> bool:
    """Whether a file name is one of the per-Spark-line keyed-watermarks jars."""
    return _JAR_NAME.match(file_name) is not None
