package io.github.keyedwatermarks.partials

import java.util.{LinkedHashMap => JLinkedHashMap}

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.catalyst.util.{ArrayData, GenericArrayData}
import org.apache.spark.unsafe.types.UTF8String

import io.github.keyedwatermarks.catalyst.CatalystAggregation
import io.github.keyedwatermarks.window.WindowAssigner

/**
 * A partition's partials as JVM objects: for payloads that Spark's HashAggregateExec cannot
 * hold (see [[HashAggregatePartials]]): object or variable-width buffers (percentile_approx,
 * min/max of strings), kept late rows, event times (adaptive lateness), sources.
 */
private[partials] final class OnHeapPartials(
    agg: CatalystAggregation,
    assigner: WindowAssigner,
    columns: PartialInputs,
    invalid: InvalidRowCounter,
    out: PartialOutput) {

  private val partials = new JLinkedHashMap[UnsafeRow, Partial]()
  // Common single STRING key without sources: partials by key value, looked up with the row's
  // own UTF8String (no grouping-key projection); the key's first partial holds the others.
  private val byStringKey = new java.util.HashMap[UTF8String, Partial](4096)
  private val groupKey = columns.groupKeyProjection()
  // With dedup: (keys, dedup values) -> the partial counting the first such row of the
  // partition (its last window). A later copy is dropped here, counted in that partial.
  private val firstCopies = new java.util.HashMap[UnsafeRow, Partial]()
  private val dedupKey =
    if (columns.dedupKey.isEmpty) null
    else org.apache.spark.sql.catalyst.expressions.UnsafeProjection.create(columns.dedupKey)

  private def lookup(row: InternalRow, start: Long): Partial =
    if (columns.stringKey >= 0) {
      val k = row.getUTF8String(columns.stringKey)
      val first = byStringKey.get(k)
      var partial = if (first == null) null else first.find(start)
      if (partial == null) {
        partial = new Partial(agg.newBuffer(), start)
        if (first == null) byStringKey.put(k.clone(), partial) else first.add(partial)
      }
      partial
    } else {
      val key = groupKey(row, start)
      var partial = partials.get(key)
      if (partial == null) {
        partial = new Partial(agg.newBuffer(), start)
        partials.put(key.copy(), partial)
      }
      partial
    }

  /**
   * Forgets the partials held (real-time mode: [[RowPartials]] turns one row at a time into its
   * partials, with the same instance for every row of the partition).
   */
  def clear(): Unit = {
    partials.clear()
    byStringKey.clear()
    firstCopies.clear()
  }

  /** Consumes the partition (skipping and counting invalid rows), then returns its partials as output rows. */
  def aggregate(rows: Iterator[InternalRow]): Iterator[InternalRow] = {
    while (rows.hasNext) {
      val row0 = rows.next()
      if (!invalid.skip(row0)) {
        val row = if (agg.retainsInputReferences) row0.copy() else row0
        val t = row.getLong(columns.eventTime)
        var last = true
        val identity = if (dedupKey == null) null else dedupKey(row)
        val firstCopy = if (identity == null) null else firstCopies.get(identity)
        if (firstCopy != null) firstCopy.duplicates += 1
        else assigner.foreachWindowStart(t) { start =>
          val partial = lookup(row, start)
          partial.partition = columns.partition
          agg.update(partial.buffer, row)
          // A row is counted (for late accounting) in its last window only: it is late iff
          // that window, the last of its windows to close, is closed.
          if (last) {
            partial.rows += 1
            if (identity != null) firstCopies.put(identity.copy(), partial)
            if (columns.kept >= 0) partial.keep(row.getStruct(columns.kept, columns.keptWidth).copy())
            if (columns.eventTimes) partial.eventTimes += t
            last = false
          }
          if (t > partial.maxEventTime) partial.maxEventTime = t
          if (columns.lateness >= 0) {
            val l = row.getLong(columns.lateness)
            if (l > partial.maxLateness) partial.maxLateness = l
          }
          if (columns.sessionEnd >= 0) {
            val end = row.getLong(columns.sessionEnd)
            if (end > partial.maxEnd) partial.maxEnd = end
          }
          if (columns.arrival >= 0) {
            val a = row.getLong(columns.arrival)
            if (a > partial.maxArrival) partial.maxArrival = a
          }
        }
      }
    }
    // (key values, window start, partial) of every partial, from whichever map was used.
    val entries: Iterator[(InternalRow, Long, Partial)] =
      if (columns.stringKey >= 0) {
        byStringKey.entrySet().iterator().asScala.flatMap { e =>
          val keyRow = InternalRow(e.getKey)
          e.getValue.ofKey.map(p => (keyRow, p.start, p))
        }
      } else partials.entrySet().iterator().asScala.map(e => (e.getKey, e.getValue.start, e.getValue))
    entries.map { case (key, start, p) => out.generic(key, start, p) }
  }
}

/** One (key, window)'s partial within a partition: live buffer, window start, row count, max event time. */
private[partials] final class Partial(val buffer: InternalRow, val start: Long) {
  // Single-string-key path: a key's first partial holds the key's others. A key touches one or
  // two windows in a batch (a few with sliding windows), so a short chain beats a map per key;
  // sessions (a partial per distinct event time) can have many, so past 8 they go in a map.
  private var next: Partial = null
  private var chained = 0
  private var more: scala.collection.mutable.LongMap[Partial] = null

  /** This key's partial of the window starting at `start`, or null. */
  def find(start: Long): Partial =
    if (this.start == start) this
    else if (more != null) more.getOrNull(start)
    else {
      var p = next
      while (p != null && p.start != start) p = p.next
      p
    }

  def add(p: Partial): Unit =
    if (more != null) more.update(p.start, p)
    else if (chained < 8) { p.next = next; next = p; chained += 1 }
    else {
      more = scala.collection.mutable.LongMap.empty[Partial]
      var q = next
      while (q != null) { more.update(q.start, q); q = q.next }
      more.update(p.start, p)
      next = null
    }

  /** This partial and the others of its key. */
  def ofKey: Iterator[Partial] =
    Iterator.single(this) ++ (if (more != null) more.valuesIterator
                              else Iterator.iterate(next)(_.next).takeWhile(_ != null))

  var rows: Long = 0L
  /** With dedup: copies of this partial's row dropped in the partition, and the partition. */
  var duplicates: Long = 0L
  var partition: Long = 0L
  var maxEventTime: Long = Long.MinValue
  var maxLateness: Long = Long.MinValue
  var maxEnd: Long = Long.MinValue
  var maxArrival: Long = Long.MinValue
  /** Event times of the rows this partial counts (adaptive lateness only). */
  lazy val eventTimes = scala.collection.mutable.ArrayBuffer.empty[Long]
  private var kept: scala.collection.mutable.ArrayBuffer[InternalRow] = null
  def keep(row: InternalRow): Unit = {
    if (kept == null) kept = scala.collection.mutable.ArrayBuffer.empty
    kept += row
  }
  def keptRows: ArrayData = new GenericArrayData(if (kept == null) Array.empty[Any] else kept.toArray[Any])
}
