"""What may change in a query and still resume from its checkpoint (docs/semantics.md,
"Upgrades"): each change below is made between two runs over the same checkpoint; it either
resumes (and then the windows it emits are checked) or is refused with an error that names what
changed, before the first micro-batch after the restart runs: nothing is committed, and the old
definition still resumes."""

from __future__ import annotations

import datetime

import pytest
from pyspark.sql import functions as F

import keyed_watermarks as kw
import state_queries as sq


def keyed(events, **options):
    return kw.keyed_watermark(events, key="device", event_time="ts", **{"lateness": "5 seconds", **options})


BASE = lambda e: keyed(e).window("10 seconds").agg_with_report(*sq._aggs())  # noqa: E731

# change -> (the changed query, None if it resumes, else what its refusal says)
CHANGES = {
    "smaller lateness": (lambda e: keyed(e, lateness="2 seconds").window("10 seconds")
                         .agg_with_report(*sq._aggs()), None),
    "allowed lateness added": (lambda e: keyed(e).window("10 seconds", allowed_lateness="10 seconds")
                               .agg_with_report(*sq._aggs()), None),
    "output columns renamed": (lambda e: keyed(e).window("10 seconds").agg_with_report(
        F.count("*").alias("n"), F.sum("temp").alias("s"), F.max("temp").alias("hi")).withColumnRenamed(
        "n", "rows"), None),
    "adaptive lateness added": (lambda e: keyed(e, adaptive_lateness=kw.AdaptiveLateness(0.9)).window("10 seconds")
                                .agg_with_report(*sq._aggs()), None),
    "max_skew added": (lambda e: keyed(e, max_skew="8 seconds").window("10 seconds")
                       .agg_with_report(*sq._aggs()), None),
    "dedup added": (lambda e: keyed(e, dedup=["temp", "gw"]).window("10 seconds")
                    .agg_with_report(*sq._aggs()), None),
    "aggregate added": (lambda e: keyed(e).window("10 seconds").agg_with_report(
        *sq._aggs(), F.min("temp").alias("lo")), "written for another schema (other aggregates"),
    "window size changed": (lambda e: keyed(e).window("20 seconds").agg_with_report(*sq._aggs()),
                            "written for another window spec (window size, slide, or session gap kind)"),
    "key columns changed": (lambda e: kw.keyed_watermark(e, key="gw", event_time="ts", lateness="5 seconds")
                            .window("10 seconds").agg_with_report(*sq._aggs()),
                            "written for other key columns (device string) than this query's (gw string)"),
    # Spark's own check, before the first micro-batch: idle_timeout on the wall clock needs
    # processing-time timers.
    "idle_timeout added": (lambda e: keyed(e, idle_timeout="1 minute", idle_clock="processing_time").window("10 seconds")
                           .agg_with_report(*sq._aggs()), "Cannot change timeMode from EventTime to ProcessingTime"),
}


def run(spark, build, input_dir, checkpoint, out):
    events = spark.readStream.schema(sq.SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
    q = (build(events).writeStream.format("parquet").outputMode("append").option("path", str(out))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    if q.exception() is not None:
        raise q.exception()


def windows(spark, out):
    """(device, start, n, revision) of the window rows written to `out` (n under either name)."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(str(out / "part-*")).where("kw_kind = 'window'")
    n = "rows" if "rows" in df.columns else "n"
    rev = F.col("revision") if "revision" in df.columns else F.lit(0)
    return [tuple(r) for r in df.select("device", F.unix_micros("window.start"), n, rev).collect()]


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_changed_query_resumes_or_is_refused(spark, workdir, change):
    build, refusal = CHANGES[change]
    files = sq.make_files(4)
    input_dir, checkpoint, out = workdir / "input", workdir / "ckpt", workdir / "out"
    sq.write_files(spark, files[:2], input_dir)
    run(spark, BASE, input_dir, checkpoint, out)
    before = windows(spark, out)
    commits = sorted(p.name for p in (checkpoint / "commits").iterdir())
    sq.write_files(spark, files[2:], input_dir, first=2)
    if refusal is not None:
        with pytest.raises(Exception) as refused:
            run(spark, build, input_dir, checkpoint, workdir / "out2")
        assert refusal in str(refused.value)
        assert "restart" in str(refused.value) and "checkpoint" in str(refused.value)
        # The refused micro-batch committed nothing: the checkpoint resumes as it was.
        assert sorted(p.name for p in (checkpoint / "commits").iterdir()) == commits
        return
    run(spark, build, input_dir, checkpoint, workdir / "out2")
    after = windows(spark, workdir / "out2")
    assert after, "windows emitted after the restart"
    both = before + after
    assert len({(d, s, r) for d, s, _, r in both}) == len(both), "no window emitted twice"
    rows = sum(1 for f in files for d, *_ in f if d is not None)
    assert sum(n for _, _, n, r in both if r == 0) <= rows, "each row in one window at most"
    if change == "output columns renamed":
        # Nothing but names changed: the windows of an uninterrupted run, value for value.
        run(spark, BASE, input_dir, workdir / "full-ckpt", workdir / "full")
        assert sorted(both) == sorted(windows(spark, workdir / "full"))


AT = lambda s: datetime.datetime(2025, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=s)  # noqa: E731
TWENTY = lambda e: keyed(e).window("20 seconds").agg_with_report(*sq._aggs())  # noqa: E731


def commits(checkpoint):
    return sorted(p.name for p in (checkpoint / "commits").glob("[0-9]*"))


def test_a_refusal_comes_before_a_batch_of_only_new_keys_and_the_old_query_resumes(spark, workdir):
    """The refusal does not wait for a key with stored windows: the checkpoint's record of the
    keyed stage refuses the changed query before its first micro-batch runs, even one that
    touches only new keys, so the checkpoint still serves the old definition (docs/semantics.md,
    "Upgrades")."""
    input_dir, checkpoint = workdir / "input", workdir / "ckpt"
    # "a" keeps an open window [20 s, 30 s) in state; the default max_skew fires no timer here.
    sq.write_files(spark, [[("a", AT(1), 1.0, "g"), ("a", AT(25), 1.0, "g")]], input_dir)
    run(spark, BASE, input_dir, checkpoint, workdir / "out")
    before = commits(checkpoint)
    sq.write_files(spark, [[("new", AT(26), 1.0, "g")]], input_dir, first=1)
    with pytest.raises(Exception) as refused:
        run(spark, TWENTY, input_dir, checkpoint, workdir / "out2")  # only a new key: refused all the same
    message = str(refused.value)
    assert "written for another window spec" in message
    # Both sides named: this query's spec and the one the state was written for.
    assert "than this query's tumbling windows of 20000000 microseconds" in message
    assert "(the state's: tumbling windows of 10000000 microseconds)" in message
    assert commits(checkpoint) == before
    # The old definition resumes: "a"'s stored window gets its row and fires, with the new key's.
    sq.write_files(spark, [[("a", AT(27), 1.0, "g"), ("new", AT(27), 1.0, "g"), ("a", AT(45), 1.0, "g"),
                            ("new", AT(45), 1.0, "g")]], input_dir, first=2)
    run(spark, BASE, input_dir, checkpoint, workdir / "out3")
    assert sorted((d, s, n) for d, s, n, _ in windows(spark, workdir / "out3")) == [
        ("a", int(AT(20).timestamp()) * 1_000_000, 2), ("new", int(AT(20).timestamp()) * 1_000_000, 2)]


def test_a_first_run_that_commits_nothing_binds_no_definition(spark, workdir):
    """The record binds once a micro-batch from the one that wrote it has committed: a first run
    that fails before it commits leaves the checkpoint to the next definition."""
    input_dir, checkpoint = workdir / "input", workdir / "ckpt"
    sq.write_files(spark, [[("a", AT(1), 1.0, "g"), ("boom", AT(2), 1.0, "g")]], input_dir)
    failing = lambda e: TWENTY(e.withColumn(  # noqa: E731
        "temp", F.when(F.col("device") == "boom", F.raise_error(F.lit("boom"))).otherwise(F.col("temp"))))
    with pytest.raises(Exception) as failed:
        run(spark, failing, input_dir, checkpoint, workdir / "out")
    assert "boom" in str(failed.value) and "written for" not in str(failed.value)
    assert commits(checkpoint) == []
    run(spark, lambda e: BASE(e.where("device <> 'boom'")), input_dir, checkpoint, workdir / "out2")
    assert "0" in commits(checkpoint)
    # From then on the record binds: the 20-second windows are refused.
    sq.write_files(spark, [[("a", AT(3), 1.0, "g")]], input_dir, first=1)
    with pytest.raises(Exception) as refused:
        run(spark, TWENTY, input_dir, checkpoint, workdir / "out3")
    assert "written for another window spec" in str(refused.value)
