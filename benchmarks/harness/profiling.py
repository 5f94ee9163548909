"""Java Flight Recordings of the timed runs (--profile)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession


def start_recording(spark: SparkSession, out_dir: Path, config: str, method: str):
    """Starts a Java Flight Recording (JDK 'profile' settings: execution samples every 10 ms,
    allocation, GC) in the driver JVM, which in local mode runs the executors too."""
    jvm = spark.sparkContext._jvm
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"{config.replace('/', '_').replace(' ', '_')}__{method}.jfr"
    path = (out_dir / name).resolve()
    rec = jvm.jdk.jfr.Recording(jvm.jdk.jfr.Configuration.getConfiguration("profile"))
    rec.setName(name)
    rec.setDestination(jvm.java.io.File(str(path)).toPath())
    rec.start()
    return rec, path


def stop_recording(recording) -> Path:
    rec, path = recording
    rec.stop()  # writes the destination file
    rec.close()
    return path
