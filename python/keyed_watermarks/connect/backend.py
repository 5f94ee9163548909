"""Spark Connect: not supported yet (the plugin is being built); one clear error."""

from __future__ import annotations

from typing import Any

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import DataFrame


class ConnectBackend:
    def __init__(self, events: DataFrame) -> None:
        raise PySparkRuntimeError(
            message=(
                "keyed_watermarks runs its operator in the Spark driver's JVM and does not "
                "support Spark Connect sessions yet; use a classic SparkSession built with "
                "keyed_watermarks.configure(SparkSession.builder)"
            )
        )

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - never constructed
        raise AttributeError(name)
