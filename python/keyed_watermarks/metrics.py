"""Per-micro-batch counts of a keyed-watermark query, as a plain dict, from a progress report."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping

from pyspark.errors import PySparkTypeError

from keyed_watermarks._contract import INPUT_METRICS, JOIN_METRICS, OUTPUT_METRICS, STAGE_SEPARATOR


def metrics(progress: Any) -> Dict[str, Any]:
    """Our counts for one micro-batch (`Semantics, "Per-batch metrics" <../semantics.html#per-batch-metrics-kw-metrics-progress>`__).

    :param progress: a ``StreamingQueryProgress`` (classic or Spark Connect) or its JSON dict.
    :returns: a plain dict of the micro-batch's counts.

    ``progress`` is a ``StreamingQueryProgress`` (``query.lastProgress``, an element of
    ``query.recentProgress`` or ``event.progress`` in a ``StreamingQueryListener``), of a classic
    or a Spark Connect session, or its JSON as a dict (``json.loads(progress.json)``). The result
    merges the observed metrics ``keyed_watermarks_input`` and ``keyed_watermarks_output`` (input
    and invalid rows, windows emitted, late rows, keys in the batch, new and released keys, open
    windows, watermark lag, stuck keys) with ``batch_id`` and, from Spark's state operator,
    ``state_rows`` (rows in state: one per key, plus one per key for adaptive lateness's sketch
    and one per (key, source) for min of inputs) and ``state_rows_removed``.

    A query with several keyed stages (``keyed_watermark(..., name=...)``) also gets ``stages``:
    each stage's counts by its name (the first, unnamed stage under ``""``); the top level keeps
    the first stage's counts, and ``state_rows`` is the first keyed operator's in Spark's
    progress (``stateOperators``).

    A query with per-key joins (``kw.as_of_join``, ``kw.interval_join``) gets ``joins``: each
    join's counts (``keyed_watermarks_join``: rows of each status, keys handled, most rows a
    key holds, watermark lags) by its name, the first unnamed join under ``""``.

    On a running query, ``kw.metrics(query.lastProgress)["late_rows"]``. From a progress's JSON
    (here cut down to two observed fields):

    >>> kw.metrics({"batchId": 3, "observedMetrics": {
    ...     "keyed_watermarks_output": {"windows_emitted": 2, "late_rows": 1}}})
    {'batch_id': 3, 'windows_emitted': 2, 'late_rows': 1}
    """
    if progress is None:
        raise PySparkTypeError(message="metrics: expected a StreamingQueryProgress (or its JSON dict), got None")
    out: Dict[str, Any] = {"batch_id": _field(progress, "batchId")}
    observed = _field(progress, "observedMetrics") or {}
    stages: Dict[str, Dict[str, Any]] = {}
    joins: Dict[str, Dict[str, Any]] = {}
    for metric, row in observed.items():
        for base, named in ((INPUT_METRICS, stages), (OUTPUT_METRICS, stages), (JOIN_METRICS, joins)):
            if metric == base or metric.startswith(base + STAGE_SEPARATOR):
                named.setdefault(metric[len(base) + 1 :], {}).update(_row(row))
    # The query's first (unnamed) stage, or its only one, at the top level as before stages had
    # names; every stage, the first one under "", in "stages" when there are several.
    if "" in stages or len(stages) == 1:
        out.update(stages.get("", next(iter(stages.values()), {})))
    if len(stages) > 1:
        out["stages"] = stages
    if joins:
        out["joins"] = joins
    operators = _field(progress, "stateOperators") or []
    keyed = [op for op in operators if _field(op, "operatorName") == "transformWithStateExec"]
    if keyed:
        out["state_rows"] = _field(keyed[0], "numRowsTotal")
        out["state_rows_removed"] = _field(keyed[0], "numRowsRemoved")
    return out


def _field(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _row(row: Any) -> Dict[str, Any]:
    """A metrics row as a dict: a classic ``Row``, Spark Connect's ``Row(values=[...], schema=...)``
    (the schema as a JSON dict or string, or a StructType), or a dict."""
    if isinstance(row, Mapping):
        return dict(row)
    fields = getattr(row, "__fields__", None)
    if fields is not None and set(fields) == {"values", "schema"}:
        names = _names(row["schema"])
        return dict(zip(names, row["values"]))
    return row.asDict()


def _names(schema: Any) -> list:
    if hasattr(schema, "fieldNames"):
        return list(schema.fieldNames())
    if isinstance(schema, str):
        schema = json.loads(schema)
    return [f["name"] for f in schema["fields"]]


__all__ = ["metrics"]
