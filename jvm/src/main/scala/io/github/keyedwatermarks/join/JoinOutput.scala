package io.github.keyedwatermarks.join

import org.apache.spark.sql.Row

/**
 * The operator's output row of both per-key joins: the first side's columns, the second side's
 * other than the keys (`secondOutput`, their ordinals there), the join's status, then the key
 * metrics column ([[JoinMetrics.KeyColumn]], null but in a key row). A row with only a second
 * side (a late or invalid one) still carries its keys, in the first side's key columns
 * (`keyOrdinals`: each key's ordinal in the first side, then in the second).
 */
private[keyedwatermarks] final case class JoinOutput(firstWidth: Int, secondOutput: Array[Int],
    keyOrdinals: Array[(Int, Int)]) {
  val width: Int = firstWidth + secondOutput.length + 2
  private val statusOrdinal = width - 2

  /** `first` or `second` may be null (that side's columns null), not both. */
  def row(first: Row, second: Row, status: String): Row = {
    val values = new Array[Any](width)
    if (first != null) {
      var i = 0
      while (i < firstWidth) { values(i) = first.get(i); i += 1 }
    } else keyOrdinals.foreach { case (f, s) => values(f) = second.get(s) }
    if (second != null) {
      var j = 0
      while (j < secondOutput.length) { values(firstWidth + j) = second.get(secondOutput(j)); j += 1 }
    }
    values(statusOrdinal) = status
    Row.fromSeq(values.toSeq)
  }

  /** A key's metrics row (see [[JoinMetrics]]): the join's columns null. */
  def keyRow(heldRows: Long, watermark: Option[Long]): Row = {
    val values = new Array[Any](width)
    values(statusOrdinal) = JoinMetrics.KeyStatus
    values(width - 1) = JoinMetrics.keyPart(heldRows, watermark)
    Row.fromSeq(values.toSeq)
  }
}
