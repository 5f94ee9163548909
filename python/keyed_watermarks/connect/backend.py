"""The Spark Connect backend: the same three calls as the py4j one (``ClassicBackend``), and the
two joins (``join``), sent as a KeyedWatermarksRelation that the server plugin plans with the same Scala code.

Connect builds plans lazily; classic raises bad input when ``keyed_watermark(...)``,
``.window(...)`` or ``.agg(...)`` is called. So each call here has the server analyse its
relation at once (``df.schema``), which runs the plugin and raises the plugin's exceptions
(``IllegalArgumentException``, ``AnalysisException``) as the same pyspark.errors types.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

from pyspark.errors import PySparkException, PySparkRuntimeError
from pyspark.sql import Column, DataFrame

from keyed_watermarks.connect import PLUGIN_CLASS, PLUGIN_CONF, message
from keyed_watermarks.connect.plan import KeyedWatermarksPlan


class ConnectBackend:
    def __init__(self, events: DataFrame) -> None:
        self._session = events.sparkSession

    def validate_watermark(self, events: DataFrame, options: Dict[str, Any], columns: Mapping[str, Column]) -> None:
        self._analysed(events, options, columns, [], message.VALIDATE_WATERMARK)

    def validate_windows(self, events: DataFrame, options: Dict[str, Any], columns: Mapping[str, Column]) -> None:
        self._analysed(events, options, columns, [], message.VALIDATE_WINDOWS)

    def plan(
        self, events: DataFrame, options: Dict[str, Any], columns: Mapping[str, Column], aggregates: List[Column]
    ) -> DataFrame:
        return self._analysed(events, options, columns, aggregates, message.PLAN)

    def join(self, first: DataFrame, second: DataFrame, options: Dict[str, Any], step: int) -> DataFrame:
        """A per-key join (``message.AS_OF_JOIN`` or ``message.INTERVAL_JOIN``) of two DataFrames."""
        return self._analysed(first, options, {}, [], step, other=second)

    def _analysed(
        self,
        events: DataFrame,
        options: Dict[str, Any],
        columns: Mapping[str, Column],
        aggregates: List[Column],
        step: int,
        other: Optional[DataFrame] = None,
    ) -> DataFrame:
        from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

        other_plan = other._plan if other is not None else None
        plan = KeyedWatermarksPlan(events._plan, options, columns, aggregates, step, other_plan)  # type: ignore[arg-type]
        df = ConnectDataFrame(plan, self._session)  # type: ignore[arg-type]
        try:
            df.schema
        except PySparkException as e:
            if _no_plugin(e):
                raise PySparkRuntimeError(message=_NO_PLUGIN_MESSAGE) from None
            raise
        return df


_NO_PLUGIN_MESSAGE = (
    "the Spark Connect server has no keyed-watermarks plugin: start it with the "
    "keyed-watermarks jar and the plugin, e.g. `start-connect-server.sh --jars "
    f"<keyed-watermarks jar> --conf {PLUGIN_CONF}={PLUGIN_CLASS}` (for a local "
    "SparkSession.builder.remote('local[...]'), build the session with "
    "keyed_watermarks.configure(SparkSession.builder.remote(...)))"
)


def _no_plugin(e: PySparkException) -> bool:
    """The server has no handler for our extension (CONNECT_INVALID_PLAN.NO_HANDLER_FOR_EXTENSION)."""
    condition = e.getCondition() if hasattr(e, "getCondition") else None
    return condition == "CONNECT_INVALID_PLAN.NO_HANDLER_FOR_EXTENSION" or (
        "NO_HANDLER_FOR_EXTENSION" in str(e) and message.TYPE_NAME in str(e)
    )
