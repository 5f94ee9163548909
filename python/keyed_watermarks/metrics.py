"""Our per-batch counts from a streaming progress, the same on classic and Spark Connect.

A classic session's ``progress.observedMetrics["keyed_watermarks_output"]`` is a Row of named
counts; Spark Connect rebuilds the progress from its JSON, where an observed row is
``{"values": [...], "schema": {...}}``, so the same lookup gets ``Row(values=..., schema=...)``.
:func:`metrics` reads either (and the JSON dict of either) into one plain dict.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from pyspark.errors import PySparkTypeError

#: The observations keyed-watermarks adds to a query (see docs/semantics.md).
OBSERVATIONS = ("keyed_watermarks_input", "keyed_watermarks_output")


def metrics(progress: Any) -> Dict[str, Dict[str, int]]:
    """The keyed-watermarks counts of one micro-batch, e.g.
    ``{"keyed_watermarks_output": {"windows_emitted": 2, "late_rows": 1, ...},
    "keyed_watermarks_input": {"input_rows": 7, "null_key_rows": 0, ...}}``.

    ``progress`` is a ``StreamingQueryProgress`` (``query.lastProgress``,
    ``query.recentProgress[i]``, a listener event's ``progress``) or its JSON as a dict, from a
    classic or a Spark Connect session. Observations the batch did not report are absent.

    >>> kw.metrics(query.lastProgress)["keyed_watermarks_output"]["late_rows"]  # doctest: +SKIP
    """
    if not isinstance(progress, Mapping):
        raise PySparkTypeError(
            message=f"metrics expects a StreamingQueryProgress (query.lastProgress), got {type(progress).__name__}"
        )
    observed = progress.get("observedMetrics") or {}
    return {name: _counts(observed[name]) for name in OBSERVATIONS if name in observed}


def _counts(row: Any) -> Dict[str, int]:
    fields = row.asDict() if hasattr(row, "asDict") else dict(row)
    schema = fields.get("schema")
    if set(fields) == {"values", "schema"} and isinstance(schema, Mapping):
        # Spark Connect: the row's values in its schema's field order.
        return dict(zip((f["name"] for f in schema["fields"]), fields["values"]))
    return fields
