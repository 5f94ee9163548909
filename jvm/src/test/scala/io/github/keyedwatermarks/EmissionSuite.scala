package io.github.keyedwatermarks

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.emission.{Firing, Pane}
import io.github.keyedwatermarks.planner.PaneRules
import io.github.keyedwatermarks.spec.{DurationOption, Emission, FixedGap, Sessions, Tumbling}
import io.github.keyedwatermarks.state.OpenWindowRows

/** The emit option and the firing rule (docs/semantics.md, "Panes and accumulation"). */
class EmissionSuite extends AnyFunSuite {
  private val every = Emission(Emission.EveryBatch, Emission.Accumulating)
  private val final_ = PaneRules.of(Emission.Default)
  private val everyBatch = PaneRules.of(every)

  test("emit='final' fires as revisions always did: the first firing when due, then one per change") {
    // In final mode a window that fired was due then, and the watermark never moves back.
    for (revisions <- Seq(0, 1, 3); due <- Seq(false, true); changed <- Seq(false, true) if revisions == 0 || due) {
      val before = (revisions > 0 && changed) || (revisions == 0 && due)
      val pane = Firing.pane(final_, due, firedOnTime = revisions > 0, changed)
      assert(pane.isDefined == before, s"revisions=$revisions due=$due changed=$changed")
      assert(pane.forall(_ == (if (revisions == 0) Pane.OnTime else Pane.Late)))
    }
  }

  test("emit='every_batch': early panes on change, exactly one on-time pane, late panes on change") {
    assert(Firing.pane(everyBatch, due = false, firedOnTime = false, changed = true).contains(Pane.Early))
    assert(Firing.pane(everyBatch, due = false, firedOnTime = false, changed = false).isEmpty)
    assert(Firing.pane(everyBatch, due = true, firedOnTime = false, changed = false).contains(Pane.OnTime))
    assert(Firing.pane(everyBatch, due = true, firedOnTime = false, changed = true).contains(Pane.OnTime))
    assert(Firing.pane(everyBatch, due = true, firedOnTime = true, changed = true).contains(Pane.Late))
    assert(Firing.pane(everyBatch, due = true, firedOnTime = true, changed = false).isEmpty)
    // A session that fired on time and grew past the watermark (allowed lateness): a late pane at
    // once with early firings; with emit='final' its next revision waits until it is due again.
    assert(Firing.pane(everyBatch, due = false, firedOnTime = true, changed = true).contains(Pane.Late))
    assert(Firing.pane(final_, due = false, firedOnTime = true, changed = true).isEmpty)
    assert(Firing.pane(final_, due = true, firedOnTime = true, changed = true).contains(Pane.Late))
  }

  test("a window's state row gains a field only when retracting (other checkpoints stay readable)") {
    val buffer = StructType(Seq(StructField("count", LongType, nullable = false)))
    assert(new OpenWindowRows(buffer).schema.fieldNames.toSeq ==
      Seq("count", "kw_revisions", "kw_end", "kw_start", "kw_dirty"))
    assert(new OpenWindowRows(buffer, Some(buffer)).schema.fieldNames.last == "kw_previous_pane")
    // Sessions with early panes store whether their on-time pane fired (new queries only).
    val flagged = new OpenWindowRows(buffer, Some(buffer), onTimeFlag = true)
    assert(flagged.schema.fieldNames.takeRight(2).toSeq == Seq("kw_previous_pane", "kw_on_time_fired"))
    val row = flagged.row(InternalRow(3L), 1, 10L, 20L, dirty = false, previous = InternalRow(2L), onTimeFired = true)
    assert(flagged.onTimeFired(row) && flagged.previous(row).getLong(0) == 2L && flagged.end(row) == 20L)
  }

  test("bad combinations fail before the query starts, naming the option") {
    def error(f: => Any): String = intercept[IllegalArgumentException](f).getMessage
    assert(error(Emission.of(Some("always"), None)).startsWith("emit: expected 'final', 'every_batch' or 'every <"))
    assert(Emission.of(Some("every 10 seconds"), None).earlyPaneIntervalMs == 10000L)
    assert(error(Emission.of(Some("every 1 month"), None)).startsWith("emit: '1 month' uses months"))
    assert(error(Emission.of(Some("every 10 seconds"), None).validate(
          Sessions(FixedGap(DurationOption("gap", "10 seconds"))))).contains("not supported for session windows yet"))
    assert(error(Emission.of(None, Some("merging"))).startsWith("accumulation: expected"))
    val tumbling = Tumbling(DurationOption("window", "10 seconds"))
    assert(error(Emission.of(None, Some("retracting")).validate(tumbling)).startsWith("accumulation: 'retracting'"))
    val sessions = Sessions(FixedGap(DurationOption("gap", "10 seconds")))
    every.validate(sessions)
    every.validate(tumbling)
  }
}
