package io.github.keyedwatermarks.operator

import scala.collection.mutable

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeRow

import io.github.keyedwatermarks.partials.PartialLayout
import io.github.keyedwatermarks.state.{KeyState, OpenWindow}
import io.github.keyedwatermarks.window.{AlignedWindows, SessionWindows}

/**
 * What becomes of one partial of a key (KeyedWindowProcessor): a copy (dedup) is dropped, a late
 * one is counted (its rows kept if asked), an on-time one goes into the key's windows. One place
 * for both callers: the micro-batch step, which decides every partial of the batch against the
 * watermark at its start, and real time's per-row step, which decides each row against the
 * watermark the rows before it left.
 */
private[operator] final class PartialAdmission(plan: OperatorPlan, layout: PartialLayout, state: KeyState,
    closing: WindowClosing) {

  private val startOrdinal = layout.windowStart
  private def agg = plan.aggregation

  /**
   * Admits `partial` into the key's `batch` against `watermarkAtStart`; returns its late rows (0
   * when on time or a copy). A copy is dropped before anything else: not aggregated, not late,
   * and it does not move the watermark; copies dropped within the partition are counted too.
   */
  def admit(keyValues: InternalRow, batch: KeyBatch, partial: InternalRow, watermarkAtStart: Long,
      lateRowsOut: mutable.ArrayBuffer[Row]): Long = {
    val start = partial.getLong(startOrdinal)
    if (plan.dedup) batch.duplicates += partial.getLong(layout.duplicates)
    if (plan.dedup && duplicate(partial, start)) {
      batch.duplicates += partial.getLong(layout.rows)
      0L
    } else {
      batch.update.observe(partial)
      if (closing.isLate(start, watermarkAtStart)) {
        keptLateRows(partial, keyValues, watermarkAtStart, lateRowsOut)
        partial.getLong(layout.rows)
      } else {
        add(batch, partial, start)
        0L
      }
    }
  }

  /**
   * With dedup: whether the partial is a copy of a row the key already has within its horizon
   * (see state.DedupEntries); the row's values are remembered until a row at its time is late.
   */
  private def duplicate(partial: InternalRow, start: Long): Boolean = state.dedupEntries.exists { d =>
    val values = partial.getStruct(layout.dedup, layout.dedupWidth).asInstanceOf[UnsafeRow].getBytes
    d.duplicate(values, partial.getLong(layout.dedupPartition), closing.lateFrom(start))
  }

  /**
   * An on-time partial: merged into its aligned window; or, for sessions, a new interval
   * [t, end) (end: t + gap, or the row's own end with a per-row gap) that `close` merges with
   * the key's sessions.
   */
  private def add(batch: KeyBatch, partial: InternalRow, start: Long): Unit = plan.windows match {
    case aligned: AlignedWindows =>
      val window = batch.window(aligned, start)
      agg.merge(window.buffer, partial)
      window.dirty = true
    case SessionWindows(gap) =>
      val end = gap match {
        case Some(g) => start + g
        case None => partial.getLong(layout.sessionEnd)
      }
      val interval = new OpenWindow(start, end, agg.newBuffer(), 0, dirty = true)
      agg.merge(interval.buffer, partial)
      batch.intervals += interval
  }

  /** Emits a kept late row per original row of a late partial. */
  private def keptLateRows(
      partial: InternalRow, keyValues: InternalRow, watermark: Long, out: mutable.ArrayBuffer[Row]): Unit =
    if (plan.keepLateRows) {
      val kept = partial.getArray(layout.kept)
      var i = 0
      while (i < kept.numElements()) {
        out += plan.emitter.lateRow(keyValues, kept.getStruct(i, layout.keptWidth), watermark)
        i += 1
      }
    }
}
