"""The client-side logical plan: a ``Relation.extension`` holding a KeyedWatermarksRelation."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional

from pyspark.sql.connect.plan import LogicalPlan

from keyed_watermarks.connect.message import KeyedWatermarksRelation


class KeyedWatermarksPlan(LogicalPlan):
    """``events`` plus the options, the option Columns and the aggregates, packed for the
    server plugin (io.github.keyedwatermarks.connect.KeyedWatermarksRelationPlugin); for a
    join, ``events`` is its first side and ``other`` its second."""

    def __init__(
        self,
        child: LogicalPlan,
        options: Dict[str, Any],
        columns: Mapping[str, Any],
        aggregates: List[Any],
        step: int,
        other: Optional[LogicalPlan] = None,
    ) -> None:
        expressions = [*columns.values(), *aggregates]
        # Columns may hold scalar subqueries over other DataFrames: their plans travel along as
        # references (pyspark >= 4.0's LogicalPlan API for it; older clients have none).
        collect = getattr(LogicalPlan, "_collect_references", None)
        if collect is not None:
            super().__init__(child, collect(expressions))
        else:  # pragma: no cover - clients without subquery references
            super().__init__(child)
        self._options = json.dumps(options)
        self._columns = dict(columns)
        self._aggregates = list(aggregates)
        self._step = step
        self._other = other

    def plan(self, session: Any) -> Any:
        assert self._child is not None
        message = KeyedWatermarksRelation(options=self._options, step=self._step)
        message.input.CopyFrom(self._child.plan(session))
        if self._other is not None:
            message.other.CopyFrom(self._other.plan(session))
        for name, column in self._columns.items():
            message.columns[name].CopyFrom(column.to_plan(session))
        message.aggregates.extend(c.to_plan(session) for c in self._aggregates)
        relation = self._create_proto_relation()
        relation.extension.Pack(message)
        with_relations: Optional[Any] = getattr(self, "_with_relations", None)
        return with_relations(relation, session) if with_relations is not None else relation
