package io.github.keyedwatermarks.compat

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.Platform

/**
 * Rows as opaque bytes in Spark's own UnsafeRow format. The partials handed to
 * transformWithState and the open windows kept in state travel as one BINARY value each, so
 * Spark's encoders copy one byte array instead of converting every field to an external Row
 * and back (about a tenth of the CPU at 100k keys, see benchmarks/results/profile.md).
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
   * Several rows of one schema in one array: each row's size (8 bytes, so every row stays
   * word-aligned), then its bytes.
   */
  final class Writer(schema: StructType) {
    private val project = UnsafeProjection.create(schema)
    private var buffer = new Array[Byte](256)
    private var size = 0

    def add(row: InternalRow): Unit = {
      val unsafe = project(row)
      val n = unsafe.getSizeInBytes
      if (size + 8 + n > buffer.length) buffer = java.util.Arrays.copyOf(buffer, math.max(buffer.length * 2, size + 8 + n))
      Platform.putLong(buffer, Platform.BYTE_ARRAY_OFFSET + size, n.toLong)
      unsafe.writeToMemory(buffer, Platform.BYTE_ARRAY_OFFSET + size + 8)
      size += 8 + n
    }

    /** The rows added since the last result(), and starts over. */
    def result(): Array[Byte] = {
      val out = java.util.Arrays.copyOf(buffer, size)
      size = 0
      out
    }
  }

  /** The rows a [[Writer]] wrote, each over `bytes` (not copied). */
  def rows(bytes: Array[Byte], numFields: Int): Iterator[UnsafeRow] = new Iterator[UnsafeRow] {
    private var pos = 0
    def hasNext: Boolean = pos < bytes.length
    def next(): UnsafeRow = {
      val n = Platform.getLong(bytes, Platform.BYTE_ARRAY_OFFSET + pos).toInt
      val row = new UnsafeRow(numFields)
      row.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + pos + 8, n)
      pos += 8 + n
      row
    }
  }
}
