package io.github.keyedwatermarks

import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.state.{OpenWindowRows, StageRecord, StateRelease}
import io.github.keyedwatermarks.state.StageRecord.{Refuse, Resume, Write}

/** The checkpoint's record of a keyed stage and what a restart does with it (docs/semantics.md, "Upgrades"). */
class StageRecordSuite extends AnyFunSuite {
  private val what = "the keyed stage's state in the checkpoint (state/0)"
  private def rows(fields: String*) =
    new OpenWindowRows(StructType(fields.map(StructField(_, LongType, nullable = false)))).schema
  private val tumbling = "tumbling windows of 10000000 microseconds"
  private def record(windows: String = tumbling, windowRows: StructType = rows("count", "sum"),
      keys: Seq[String] = Seq("device string"), batch: Long = 0L) =
    StageRecord.current(windows, windowRows, keys, batch)

  test("the record round-trips through its JSON") {
    val r = record(batch = 7L)
    assert(StageRecord.fromJson(r.toJson) == r)
  }

  test("no record: this query's is written, at the batch planned") {
    assert(StageRecord.decide(None, Some(4L), record(batch = 5L), what) == Write(record(batch = 5L)))
    assert(StageRecord.decide(None, None, record(), what) == Write(record()))
  }

  test("a record binds once a batch from the one that wrote it has committed") {
    val changed = record(windows = "tumbling windows of 20000000 microseconds", batch = 3L)
    // Written in batch 3, which never committed (the run failed first): the next query's is written.
    assert(StageRecord.decide(Some(record(batch = 3L)), Some(2L), changed, what) == Write(changed))
    assert(StageRecord.decide(Some(record(batch = 0L)), None, record(windows = "x"), what) ==
      Write(record(windows = "x")))
    // The same query again: the record stays as it was written.
    assert(StageRecord.decide(Some(record(batch = 3L)), Some(2L), record(batch = 3L), what) == Resume)
    // Bound: the same query resumes, another is refused.
    assert(StageRecord.decide(Some(record(batch = 3L)), Some(3L), record(batch = 9L), what) == Resume)
    assert(StageRecord.decide(Some(record(batch = 3L)), Some(3L), changed, what).isInstanceOf[Refuse])
  }

  private def refusal(stored: StageRecord, query: StageRecord): String =
    StageRecord.decide(Some(stored), Some(0L), query, what) match {
      case Refuse(message) => message
      case other => fail(s"not refused: $other")
    }

  test("another window spec is refused with the per-key check's words, naming both") {
    val m = refusal(record(), record(windows = "sliding windows of 10000000 microseconds every 5000000 microseconds"))
    assert(m.startsWith(s"$what: written for another window spec (window size, slide, or session gap kind)"))
    assert(m.contains("than this query's sliding windows of 10000000 microseconds every 5000000 microseconds"))
    assert(m.contains(s"(the state's: $tumbling)"))
    assert(m.endsWith("restart it from a new checkpoint location"))
  }

  test("what Spark's global watermark measures: a change between event time and arrival time is refused") {
    import StageRecord.{ArrivalTime, EventTime}
    def gw(g: Option[String]) = record().copy(globalWatermark = g)
    assert(StageRecord.fromJson(gw(Some(ArrivalTime)).toJson) == gw(Some(ArrivalTime)))
    val m = refusal(gw(Some(EventTime)), gw(Some(ArrivalTime)))
    assert(m.contains("is on event time (max_skew / closing), but this query's is on the arrival time (arrival_time"))
    assert(refusal(gw(Some(ArrivalTime)), gw(Some(EventTime))).contains("is on the arrival time (arrival_time"))
    // Neither side, or a record written before the field: nothing to compare (max_skew added resumes).
    for ((was, is) <- Seq(None -> Some(EventTime), Some(EventTime) -> None, None -> Some(ArrivalTime)))
      assert(StageRecord.decide(Some(gw(was)), Some(0L), gw(is), what) == Resume)
  }

  test("other aggregates are refused, naming both buffers") {
    val m = refusal(record(), record(windowRows = rows("count", "sum", "min")))
    assert(m.contains("written for another schema (other aggregates, or another version of keyed-watermarks)"))
    assert(m.contains("the state's open windows hold (count bigint, sum bigint), this query's " +
        "(count bigint, sum bigint, min bigint)"))
  }

  test("other key columns are refused, naming both") {
    val m = refusal(record(), record(keys = Seq("gateway string")))
    assert(m.contains("written for other key columns (device string) than this query's (gateway string)"))
  }

  test("a record of a newer release is refused as its stored keys are") {
    val newer = StateRelease.Release(StateRelease.Current.major + 1, 0, 0)
    val m = refusal(record().copy(release = newer), record())
    assert(m.contains(s"written by keyed-watermarks $newer, newer than this keyed-watermarks ${StateRelease.Current}"))
    // An older release's record binds this release's query as it binds its own.
    assert(StageRecord.decide(Some(record().copy(release = StateRelease.Unstamped)), Some(0L), record(),
      what) == Resume)
  }
}
