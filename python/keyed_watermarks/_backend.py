"""Where a query is planned: the py4j path on a classic session, the Spark Connect plugin on a
Connect session. Both take the same options (one JSON object, checked in the JVM by
``io.github.keyedwatermarks.spec.QueryOptions``), so both give the same results and errors.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping

from pyspark.sql import Column, DataFrame

from keyed_watermarks._jvm import is_connect, python_api


class ClassicBackend:
    """py4j: plain calls on the JVM entry point ``io.github.keyedwatermarks.python.PythonAPI``."""

    def __init__(self, events: DataFrame) -> None:
        self._api = python_api(events)
        self._jvm: Any = events.sparkSession.sparkContext._jvm  # py4j's JVMView

    def _columns(self, columns: Mapping[str, Column]) -> Any:
        jmap = self._jvm.java.util.HashMap()
        for name, c in columns.items():
            jmap.put(name, c._jc)
        return jmap

    def validate_watermark(self, events: DataFrame, options: Dict[str, Any], columns: Mapping[str, Column]) -> None:
        self._api.validateWatermark(events._jdf, json.dumps(options), self._columns(columns))

    def validate_windows(self, events: DataFrame, options: Dict[str, Any], columns: Mapping[str, Column]) -> None:
        self._api.validateWindows(events._jdf, json.dumps(options), self._columns(columns))

    def plan(
        self, events: DataFrame, options: Dict[str, Any], columns: Mapping[str, Column], aggregates: List[Column]
    ) -> DataFrame:
        jaggs = self._jvm.java.util.ArrayList()
        for c in aggregates:
            jaggs.add(c._jc)
        jdf = self._api.plan(events._jdf, json.dumps(options), self._columns(columns), jaggs)
        return DataFrame(jdf, events.sparkSession)


def backend(events: DataFrame) -> Any:
    """The backend for ``events``' session (checks that it is a DataFrame first)."""
    if not isinstance(events, DataFrame):
        from pyspark.errors import PySparkTypeError

        raise PySparkTypeError(message=f"events must be a pyspark DataFrame, got {type(events).__name__}")
    if is_connect(events.sparkSession):
        from keyed_watermarks.connect.backend import ConnectBackend

        return ConnectBackend(events)
    return ClassicBackend(events)
