package io.github.keyedwatermarks.catalyst

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.Platform

/**
 * Rows as opaque bytes in Spark's own UnsafeRow format. The partials handed to
 * transformWithState and the open windows kept in state travel as one BINARY value each, so
 * Spark's encoders copy one byte array instead of converting every field to an external Row
 * and back (see benchmarks/results/profile.md).
 */
private[keyedwatermarks] object UnsafeRowBytes {

  /** A copy of the row's bytes (an UnsafeProjection reuses its output row). */
  def bytes(row: UnsafeRow): Array[Byte] = {
    val out = new Array[Byte](row.getSizeInBytes)
    row.writeToMemory(out, Platform.BYTE_ARRAY_OFFSET)
    out
  }

  /** A row over `bytes` (not copied: the array must not change while the row is in use). */
  def row(bytes: Array[Byte], numFields: Int): UnsafeRow = {
    val row = new UnsafeRow(numFields)
    row.pointTo(bytes, bytes.length)
    row
  }

  /**
   * Several rows of one schema in one array: two fingerprints, of the schema and of `spec` (a
   * description of what the rows mean beyond their types, e.g. the window spec), then per row
   * its size (8 bytes, so every row stays word-aligned) and its bytes. The fingerprints (stable
   * across JVMs) make bytes written for another schema or spec (another query's aggregates or
   * windows restarted on the same checkpoint: Spark's state-schema check cannot look inside a
   * BINARY) fail clearly instead of being misread. A non-zero `stamp` (e.g. the release that
   * wrote the rows: state.StateRelease) goes into the upper 32 bits of the schema fingerprint, a
   * 32-bit hash; reading hands the stamp found to `checkStamp` first (0 when there is none: the
   * upper bits all 0 or all 1, as a sign-extended hash has), so that it can refuse bytes of a
   * newer writer with its own error before their schema is compared. Writes reuse one buffer:
   * one codec per thread.
   */
  final class RowsCodec(schema: StructType, spec: String = "", stamp: Int = 0, checkStamp: Int => Unit = _ => ()) {
    private val project = ProjectionPool.unsafe(schema)
    private val numFields = schema.length
    private val schemaHash = scala.util.hashing.MurmurHash3.stringHash(schema.json)
    private val schemaPrint =
      if (stamp == 0) schemaHash.toLong else (stamp.toLong << 32) | (schemaHash.toLong & 0xffffffffL)
    private val specPrint = scala.util.hashing.MurmurHash3.stringHash(spec).toLong
    private val HeaderSize = 16
    private var buffer = new Array[Byte](256)
    private var size = 0
    reset()

    /** Drops what was added since the last result(). */
    def reset(): Unit = {
      Platform.putLong(buffer, Platform.BYTE_ARRAY_OFFSET, schemaPrint)
      Platform.putLong(buffer, Platform.BYTE_ARRAY_OFFSET + 8, specPrint)
      size = HeaderSize
    }

    def add(row: InternalRow): Unit = {
      val unsafe = project(row)
      val n = unsafe.getSizeInBytes
      if (size + 8 + n > buffer.length)
        buffer = java.util.Arrays.copyOf(buffer, math.max(buffer.length * 2, size + 8 + n))
      Platform.putLong(buffer, Platform.BYTE_ARRAY_OFFSET + size, n.toLong)
      unsafe.writeToMemory(buffer, Platform.BYTE_ARRAY_OFFSET + size + 8)
      size += 8 + n
    }

    /** The rows added since the last result() (or reset()), and starts over. */
    def result(): Array[Byte] = {
      val out = java.util.Arrays.copyOf(buffer, size)
      reset()
      out
    }

    /**
     * The rows written by a codec of this schema and spec, each over `bytes` (not copied). Bytes
     * of another schema or spec, or cut short, fail with an IllegalStateException saying `what`
     * they were.
     */
    def rows(bytes: Array[Byte], what: => String): Iterator[UnsafeRow] = {
      val print = if (bytes.length < HeaderSize) 0L else Platform.getLong(bytes, Platform.BYTE_ARRAY_OFFSET)
      val stampRead = (print >>> 32).toInt
      if (bytes.length >= HeaderSize) checkStamp(if (stampRead == -1) 0 else stampRead)
      if (bytes.length < HeaderSize || print.toInt != schemaHash) {
        throw new IllegalStateException(s"$what: written for another schema (other aggregates, or another " +
          "version of keyed-watermarks) than this query's; restart it from a new checkpoint location")
      }
      if (Platform.getLong(bytes, Platform.BYTE_ARRAY_OFFSET + 8) != specPrint) {
        throw new IllegalStateException(s"$what: written for another window spec (window size, slide, or session " +
          s"gap kind) than this query's $spec; restart it from a new checkpoint location")
      }
      new Iterator[UnsafeRow] {
        private var pos = HeaderSize
        def hasNext: Boolean = pos < bytes.length
        def next(): UnsafeRow = {
          val n = if (pos + 8 <= bytes.length) Platform.getLong(bytes, Platform.BYTE_ARRAY_OFFSET + pos) else -1L
          if (n < 0 || n % 8 != 0 || pos + 8 + n > bytes.length) throw new IllegalStateException(s"$what: corrupt")
          val row = new UnsafeRow(numFields)
          row.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + pos + 8, n.toInt)
          pos += 8 + n.toInt
          row
        }
      }
    }
  }
}
