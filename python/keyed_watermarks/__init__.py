"""Per-key event-time watermarks for Spark Structured Streaming.

>>> from pyspark.sql import SparkSession, functions as F
>>> import keyed_watermarks as kw
>>> spark = kw.configure(SparkSession.builder.master("local[2]")).getOrCreate()  # doctest: +SKIP
"""

from keyed_watermarks._jvm import configure, jar_path
from keyed_watermarks.keyed import AdaptiveLateness, KeyedWatermark, KeyedWindow, keyed_watermark
from keyed_watermarks.report import foreach_batch, split_report
from keyed_watermarks.state import read_key_state
from keyed_watermarks.metrics import metrics

__version__ = "0.1.0"
__all__ = [
    "configure",
    "jar_path",
    "keyed_watermark",
    "AdaptiveLateness",
    "KeyedWatermark",
    "KeyedWindow",
    "split_report",
    "foreach_batch",
    "read_key_state",
    "metrics",
]
