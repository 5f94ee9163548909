"""Splitting the report stream of ``agg_with_report`` into results and late rows.

These run on the (small) micro-batch DataFrames that ``foreachBatch`` hands over; every row
was already processed in the JVM.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from pyspark.errors import PySparkRuntimeError, PySparkTypeError, PySparkValueError
from pyspark.sql import DataFrame, functions as F

from keyed_watermarks._contract import REPORT_COLUMNS

BatchWriter = Callable[[DataFrame, int], Any]

# What Spark's StreamExecution.isInterruptionException accepts as "interrupted by stop()" in the
# error of a Python foreachBatch function (its PROXY_ERROR pattern: this prefix, then one of these
# class names).
_PROXY_PREFIX = "py4j.protocol.Py4JJavaError: An error occurred while calling"
_INTERRUPTIONS = (
    "java.lang.InterruptedException",
    "java.io.InterruptedIOException",
    "java.nio.channels.ClosedByInterruptException",
)


def split_report(report: DataFrame) -> Tuple[DataFrame, Optional[DataFrame]]:
    """Splits a report DataFrame (or one micro-batch of it) into ``(results, late_rows)``.

    :param report: the output of :meth:`KeyedWindow.agg_with_report`, or one micro-batch of it.
    :returns: ``(results, late_rows)``; ``late_rows`` is ``None`` without ``keep_late_rows``.

    ``results`` has exactly the columns of ``.agg(...)``. ``late_rows`` has the original
    columns of each late row plus ``kw_watermark`` (the key's watermark at the start of the
    micro-batch) and ``kw_reason``, and also the invalid rows (null key, null event time or
    null source; ``kw_watermark`` null, ``kw_reason`` says which); it is ``None`` unless
    ``keep_late_rows=True`` was used.

    >>> batch = spark.createDataFrame(
    ...     [("a", 3, "window", None, None), ("a", None, "late", 2, None)],
    ...     "device STRING, n BIGINT, kw_kind STRING, kw_late_rows BIGINT, kw_watermark TIMESTAMP")
    >>> results, late_rows = kw.split_report(batch)
    >>> results.collect(), late_rows
    ([Row(device='a', n=3)], None)
    """
    if "kw_kind" not in report.columns:
        raise PySparkValueError(
            message="split_report expects the output of agg_with_report(...) (no kw_kind column)"
        )
    results = report.where(F.col("kw_kind") == "window").drop(*REPORT_COLUMNS)
    if "kw_late_row" not in report.columns:
        return results, None
    late_rows = report.where(F.col("kw_kind").isin("late_row", "invalid_row")).select(
        "kw_late_row.*", "kw_watermark", "kw_reason"
    )
    return results, late_rows


def foreach_batch(
    results: BatchWriter, late_rows: Optional[BatchWriter] = None
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function writing results and late rows with two writers.

    :param results: ``writer(df, batch_id)`` for the result rows (the columns of ``.agg``).
    :param late_rows: optional ``writer(df, batch_id)`` for the late and invalid rows (the query
        must use ``keep_late_rows=True``).
    :returns: a function to pass to ``writeStream.foreachBatch``.

    Each writer is called as ``writer(df, batch_id)``. The micro-batch is cached while both
    writers read it, so the keyed operator runs once per batch. An example is in
    :meth:`KeyedWindow.agg_with_report`; with ``late_rows`` given, the query must keep late rows
    (``agg_with_report(..., keep_late_rows=True)``), or the first batch raises a
    ``PySparkValueError`` saying so.

    >>> write = kw.foreach_batch(results=lambda df, batch_id: print(batch_id, df.collect()))
    >>> write(spark.createDataFrame(
    ...     [("a", 3, "window", None, None)],
    ...     "device STRING, n BIGINT, kw_kind STRING, kw_late_rows BIGINT, kw_watermark TIMESTAMP"), 7)
    7 [Row(device='a', n=3)]
    """
    if not callable(results) or (late_rows is not None and not callable(late_rows)):
        raise PySparkTypeError(message="foreach_batch expects callables (df, batch_id) -> None")

    def write(batch: DataFrame, batch_id: int) -> None:
        try:
            _write(batch, batch_id)
        except Exception as e:
            stop = _stopped_by(e)
            if stop is None:
                raise
            # The query is stopping: say so in one line, without the Java stack trace, in the
            # form Spark recognises (see _stopped_by).
            raise PySparkRuntimeError(
                message=f"{_PROXY_PREFIX} the foreachBatch writer of batch {batch_id}: "
                f"java.lang.InterruptedException: the query was stopped ({stop}); "
                "the micro-batch runs again after a restart"
            ) from None

    def _write(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            res, late = split_report(batch)
            results(res, batch_id)
            if late_rows is not None:
                if late is None:
                    raise PySparkValueError(
                        message="late_rows writer given but the query does not keep late rows: "
                        "use agg_with_report(..., keep_late_rows=True)"
                    )
                late_rows(late, batch_id)
        finally:
            batch.unpersist()

    return write


def _stopped_by(error: BaseException) -> Optional[str]:
    """The Java exception (class: message) in ``error``'s causes that says the query's
    ``stop()`` interrupted this foreachBatch call (an interrupt, or the micro-batch's job
    cancelled: ``SPARK_JOB_CANCELLED``, "cancelled part of cancelled job group"), or None.

    Why: the error a Python foreachBatch function raises reaches Spark as a py4j exception whose
    message is the whole Python traceback, with the Java stack trace of each Py4JJavaError in
    it (kilobytes). When the query is stopping, Spark's ``StreamExecution.isInterruptionException``
    matches that message against ``Py4JJavaError: An error occurred while
    calling((.|\\r\\n|\\r|\\n)*)(java.lang.InterruptedException|...)``, whose repeated group
    recurses once per character in ``java.util.regex``: a long message overflows the stream
    thread's stack (a ``StackOverflowError`` of 1,024 ``Pattern`` frames on stderr) and the
    stop is not recognised as one. A one-line error naming the interruption is matched at once
    and read as the stop it is."""
    seen = set()
    exc: Optional[BaseException] = error
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        throwable = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
        for _ in range(32):  # the Java cause chain
            if throwable is None:
                break
            try:
                name = throwable.getClass().getName()
                message = throwable.getMessage() or ""
                throwable = throwable.getCause()
            except Exception:  # the JVM is gone: nothing to tell it
                return None
            cancelled = "SPARK_JOB_CANCELLED" in message or ("cancelled" in message and "job group" in message)
            if name in _INTERRUPTIONS or (name == "org.apache.spark.SparkException" and cancelled):
                return f"{name}: {message}".strip().rstrip(":")[:300]
        exc = exc.__cause__ or exc.__context__
    return None
