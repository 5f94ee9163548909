"""Session gaps in calendar units end where Spark's ``session_window`` ends them.

Spark computes a row's session end as ``ts + CAST(gap AS INTERVAL)`` in the session time zone:
a "1 day" gap is 23 hours across a spring daylight-saving change, a "1 month" gap is as long
as the row's month. Both are checked against Spark's batch ``groupBy(key, session_window)``,
for a fixed gap and a per-row gap column."""

from __future__ import annotations

import datetime

import pytest
from pyspark.errors import IllegalArgumentException
from pyspark.sql import functions as F

import keyed_watermarks as kw
from support import EVENT_SCHEMA, Replay, run_to_end

UTC = datetime.timezone.utc


def at(*args) -> datetime.datetime:
    return datetime.datetime(*args, tzinfo=UTC)


def sessions(df):
    return sorted(tuple(r) for r in df.select(
        "device", F.unix_micros("session_window.start"), F.unix_micros("session_window.end"), "n").collect())


def run_keyed_vs_spark(spark, workdir, rows, gap, time_zone):
    """Our sessions (all closed by a far-later row per key) and Spark's, under `time_zone`."""
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", time_zone)
    try:
        closing = [(k, max(t for kk, t, _ in rows if kk == k) + datetime.timedelta(days=400), 0.0)
                   for k in sorted({k for k, _, _ in rows})]
        replay = Replay(spark, workdir)
        replay.add(rows)
        replay.add(closing)
        df = (kw.keyed_watermark(replay.stream(), key="device", event_time="ts", lateness="0 seconds")
              .session(gap).agg(F.count("*").alias("n")))
        run_to_end(df, workdir / "out", workdir / "checkpoint")
        ours = sessions(spark.read.schema(df.schema).parquet(str(workdir / "out")))
        batch = spark.createDataFrame(rows, EVENT_SCHEMA)
        theirs = sessions(batch.groupBy("device", F.session_window("ts", gap)).agg(F.count("*").alias("n")))
        return ours, theirs
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)


# 2024-03-10 02:00 is the spring-forward change in America/Los_Angeles (10:00 UTC).
DST_ROWS = [("a", at(2024, 3, 9, 12), 1.0), ("a", at(2024, 3, 10, 10, 30), 2.0),
            ("b", at(2024, 3, 9, 12), 3.0), ("b", at(2024, 3, 10, 11, 30), 4.0)]


@pytest.mark.parametrize("gap", ["1 day", "per-row"])
def test_day_gap_across_daylight_saving_change(spark, workdir, gap):
    # Spark's 1-day session from 2024-03-09 12:00 UTC (04:00 PST) ends 23 hours later, at
    # 2024-03-10 11:00 UTC: a@10:30 joins it, b@11:30 starts a new session.
    gap_arg = gap if gap == "1 day" else F.when(F.col("temp") >= 0, "1 day").otherwise("1 hour")
    ours, theirs = run_keyed_vs_spark(spark, workdir, DST_ROWS, gap_arg, "America/Los_Angeles")
    assert ours == theirs
    assert [n for k, _, _, n in theirs if k == "a"] == [2]
    assert [n for k, _, _, n in theirs if k == "b"] == [1, 1]


def test_month_gap_is_the_rows_month(spark, workdir):
    # February 2024 has 29 days: a@Feb 5 + 1 month = Mar 5; a@Mar 6 starts a new session, while
    # a fixed 31-day gap would have merged them. b's January session is 31 days long.
    rows = [("a", at(2024, 2, 5), 1.0), ("a", at(2024, 3, 6), 2.0), ("b", at(2024, 1, 5), 3.0),
            ("b", at(2024, 2, 4, 12), 4.0)]
    ours, theirs = run_keyed_vs_spark(spark, workdir, rows, F.lit("1 month"), "UTC")
    assert ours == theirs
    assert [n for k, _, _, n in theirs] == [1, 1, 2]


def test_gap_column_types_as_session_window_accepts(spark, workdir):
    keyed = kw.keyed_watermark(Replay(spark, workdir).stream(), key="device", event_time="ts", lateness="1 second")
    # Spark's session_window rejects these too (it casts the gap to a calendar interval).
    for bad in (F.col("temp"), F.expr("INTERVAL '1' DAY")):
        with pytest.raises(IllegalArgumentException, match="gap: the column must hold durations"):
            keyed.session(bad)
    keyed.session(F.lit("1 day 2 hours").cast("interval"))  # a calendar interval is accepted
