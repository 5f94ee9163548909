"""On a real Spark Connect session (a local Connect server started by pyspark), the API
refuses with a clear PySparkRuntimeError before any query starts."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession
    import keyed_watermarks as kw

    spark = SparkSession.builder.remote("local[1]").getOrCreate()
    events = spark.readStream.format("rate").load()
    try:
        kw.keyed_watermark(events, key="value", event_time="timestamp", lateness="5 seconds")
    except PySparkRuntimeError as e:
        print("REFUSED:", e)
    else:
        print("ACCEPTED")
    finally:
        spark.stop()
    """
)


def test_spark_connect_session_is_refused_with_instructions():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "REFUSED:" in out, out + proc.stderr[-3000:]
    assert "Spark Connect" in out and "keyed_watermarks.configure" in out
