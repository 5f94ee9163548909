package io.github.keyedwatermarks.join

import org.apache.spark.sql.Row

/**
 * The operator's output row of both per-key joins: the first side's columns, the second side's
 * other than the keys (`secondOutput`, their ordinals there), the join's status, then the key
 * metrics column ([[JoinMetrics.KeyColumn]], null but in a key row). A row with only a second
 * side (a late or invalid one) still carries its keys, in the first side's key columns
 * (`keyOrdinals`: each key's ordinal in the first side, then in the second). `statuses`: the
 * join's statuses, in the order the key rows count them.
 */
private[keyedwatermarks] final case class JoinOutput(firstWidth: Int, secondOutput: Array[Int],
    keyOrdinals: Array[(Int, Int)], statuses: Seq[String]) {
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

  /**
   * A call's metrics row (see [[JoinMetrics]]), after the call's rows `out`: the join's columns
   * null; the rows of each status among `out` (counted here, once per call, rather than per row
   * by the observation), and for a key (`key`, not a null one) its rows held and its watermark.
   */
  def keyRow(out: Iterable[Row], key: Boolean, heldRows: Long, watermark: Option[Long]): Row = {
    val counts = new Array[Long](statuses.length)
    out.foreach(r => counts(statuses.indexOf(r.getString(statusOrdinal))) += 1)
    val values = new Array[Any](width)
    values(statusOrdinal) = JoinMetrics.KeyStatus
    values(width - 1) = Row.fromSeq(Seq[Any](key, heldRows, watermark.getOrElse(null)) ++ counts)
    Row.fromSeq(values.toSeq)
  }
}
