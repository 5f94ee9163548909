package io.github.keyedwatermarks.state

import java.nio.charset.StandardCharsets

import scala.collection.mutable

import org.apache.spark.sql.Encoders
import org.apache.spark.sql.streaming.{MapState, StatefulProcessorHandle, TTLConfig}

import io.github.keyedwatermarks.watermark.ClosedWindows

/**
 * Per-key deduplication (option `dedup`; docs/semantics.md, "Deduplication"): the dedup values
 * of the key's rows seen within its horizon, in the state variable `dedup_seen` (registered only
 * with dedup, so other queries' state is unchanged), each with the watermark at which it
 * expires: when a row with the first copy's event time would be late (its last window's end
 * plus allowed lateness; a session row's own time plus allowed lateness).
 *
 * A partial holds one row's values (the partial aggregation groups by them and drops the
 * copies within a partition), and a row has a partial per window it falls in (sliding
 * windows): the first partition to bring a value in a batch owns it, so that the row's other
 * windows are kept and another partition's copy is dropped.
 */
private[keyedwatermarks] final class DedupEntries(handle: StatefulProcessorHandle) {
  // Values as ISO-8859-1 strings of their bytes (one char per byte, so equal strings are equal
  // bytes): keys that compare by content in every state store implementation.
  private val seen: MapState[String, java.lang.Long] =
    handle.getMapState(DedupEntries.Variable, Encoders.STRING, Encoders.LONG, TTLConfig.NONE)

  /** Values first seen in this batch: their owning partition and expiry (written by [[flush]]). */
  private val batch = mutable.HashMap.empty[String, (Long, Long)]

  /**
   * Whether a partial of this batch with `values` from `partition` is a copy of a row already
   * seen; if not, remembers it until the key's watermark reaches `expiresAt`.
   */
  def duplicate(values: Array[Byte], partition: Long, expiresAt: Long): Boolean = {
    val id = new String(values, StandardCharsets.ISO_8859_1)
    batch.get(id) match {
      case Some((owner, expiry)) =>
        if (owner != partition) true
        else { if (expiresAt > expiry) batch.update(id, (owner, expiresAt)); false }
      case None =>
        if (seen.containsKey(id)) true
        else { batch.update(id, (partition, expiresAt)); false }
    }
  }

  /** Writes this batch's new values and drops those the key's watermark `wm` passed. */
  def flush(wm: Long): Unit = {
    batch.foreach { case (id, (_, expiry)) =>
      if (!ClosedWindows.closedBy(expiry, wm)) seen.updateValue(id, expiry)
    }
    batch.clear()
    val it = seen.iterator()
    val expired = mutable.ArrayBuffer.empty[String]
    while (it.hasNext) {
      val (values, expiry) = it.next()
      if (ClosedWindows.closedBy(expiry, wm)) expired += values
    }
    expired.foreach(seen.removeKey)
  }

  /** The key left state: its entries go too. */
  def clear(): Unit = { batch.clear(); seen.clear() }
}

private[keyedwatermarks] object DedupEntries {
  val Variable = "dedup_seen"
}
