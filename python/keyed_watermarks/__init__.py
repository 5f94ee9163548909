"""Per-key event-time watermarks for Spark Structured Streaming.

>>> from pyspark.sql import SparkSession, functions as F
>>> import keyed_watermarks as kw
>>> spark = kw.configure(SparkSession.builder.master("local[2]")).getOrCreate()
>>> kw.keyed_watermark(events, key="device", event_time="ts", lateness="5 seconds")  # doctest: +ELLIPSIS
<keyed_watermarks.keyed.KeyedWatermark object at ...>
"""

# An unsupported pyspark is refused here, before anything imports its modules or starts.
from keyed_watermarks._versions import __version__ as __version__, require_supported_pyspark

require_supported_pyspark()

from keyed_watermarks._jvm import configure, jar_path  # noqa: E402
from keyed_watermarks.join import as_of_join, interval_join  # noqa: E402
from keyed_watermarks.keyed import AdaptiveLateness, KeyedWatermark, KeyedWindow, keyed_watermark  # noqa: E402
from keyed_watermarks.metrics import metrics  # noqa: E402
from keyed_watermarks.report import foreach_batch, split_report  # noqa: E402
from keyed_watermarks.rollup import rollup  # noqa: E402
from keyed_watermarks.state import read_key_state  # noqa: E402

__all__ = [
    "configure",
    "jar_path",
    "keyed_watermark",
    "rollup",
    "as_of_join",
    "interval_join",
    "AdaptiveLateness",
    "KeyedWatermark",
    "KeyedWindow",
    "split_report",
    "foreach_batch",
    "metrics",
    "read_key_state",
]
