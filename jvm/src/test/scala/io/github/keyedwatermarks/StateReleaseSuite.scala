package io.github.keyedwatermarks

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.apache.spark.unsafe.Platform
import org.scalatest.funsuite.AnyFunSuite

import io.github.keyedwatermarks.catalyst.UnsafeRowBytes.RowsCodec
import io.github.keyedwatermarks.state.StateRelease
import io.github.keyedwatermarks.state.StateRelease.Release

/** The release stamped into a key's stored windows (docs/semantics.md, "Upgrades"). */
class StateReleaseSuite extends AnyFunSuite {
  private val schema = StructType(Seq(StructField("x", LongType, nullable = false)))
  private val spec = "tumbling windows of 10 microseconds"

  private def codec(writer: Release, reader: Release = StateRelease.Current) =
    new RowsCodec(schema, spec, writer.stamp, StateRelease.requireReadable(_, "the open windows in state", reader))

  private def written(c: RowsCodec, values: Long*): Array[Byte] = {
    values.foreach(v => c.add(InternalRow(v)))
    c.result()
  }

  private def read(c: RowsCodec, bytes: Array[Byte]): Seq[Long] =
    c.rows(bytes, "the open windows in state").map(_.getLong(0)).toList

  test("this release is python/keyed_watermarks/VERSION") {
    val version = scala.io.Source.fromFile("../python/keyed_watermarks/VERSION").mkString.trim
    assert(StateRelease.Current == StateRelease.parse(version))
    assert(StateRelease.Current >= StateRelease.Unstamped)
  }

  test("state written before releases were stamped (0.1.0: the bare 32-bit fingerprint) is read") {
    // 0.1.0 wrote the schema hash sign-extended: upper 32 bits all 0 or all 1, depending on it.
    val unstamped = written(new RowsCodec(schema, spec), 3L, 4L)
    val upper = Platform.getInt(unstamped, Platform.BYTE_ARRAY_OFFSET + 4)
    assert(upper == 0 || upper == -1)
    assert(read(codec(StateRelease.Current), unstamped) == Seq(3L, 4L))
  }

  test("state of this and earlier releases is read; a newer release's is refused naming both") {
    val current = StateRelease.Current
    assert(read(codec(current), written(codec(current), 5L)) == Seq(5L))
    val older = Release(0, 1, 1)
    val reader = Release(0, 2, 0)
    assert(read(codec(reader, reader), written(codec(older, reader), 6L)) == Seq(6L))
    val newer = Release(1, 0, 3)
    val e = intercept[IllegalStateException](read(codec(reader, reader), written(codec(newer, reader), 7L)))
    assert(e.getMessage.contains("written by keyed-watermarks 1.0.3, newer than this keyed-watermarks 0.2.0"),
      e.getMessage)
  }

  test("a newer release is named even when its schema differs too") {
    val newer = new RowsCodec(schema.add(StructField("y", LongType, nullable = false)), spec,
      Release(3, 0, 0).stamp)
    newer.add(InternalRow(1L, 2L))
    val e = intercept[IllegalStateException](read(codec(StateRelease.Current), newer.result()))
    assert(e.getMessage.contains("written by keyed-watermarks 3.0.0"), e.getMessage)
  }

  test("releases order by number, stamps round-trip and never look unstamped") {
    for (r <- Seq(Release(0, 1, 0), Release(0, 2, 0), Release(1, 0, 0), Release(127, 4095, 4095))) {
      assert(StateRelease.fromStamp(r.stamp) == r)
      assert(r.stamp != 0 && r.stamp != -1)
    }
    assert(Release(0, 10, 0) > Release(0, 9, 9))
    assert(StateRelease.parse("0.2.0.dev0") == Release(0, 2, 0))
  }
}
