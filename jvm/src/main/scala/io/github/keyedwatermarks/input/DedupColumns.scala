package io.github.keyedwatermarks.input

import org.apache.spark.sql.{Column, functions => F}
import org.apache.spark.sql.catalyst.expressions.RowOrdering
import org.apache.spark.sql.types.{DataType, MapType, StructType}

import io.github.keyedwatermarks.spec.OptionError

/**
 * The `dedup` option's columns: checked against the input before the query starts, and
 * projected as one struct per row (the values a duplicate repeats), which the partial
 * aggregation groups by and the operator remembers per key (state.DedupEntries).
 */
private[keyedwatermarks] object DedupColumns {

  /** Refuses what cannot be a duplicate's identity, naming the column. */
  def check(columns: Seq[String], input: InputPlan): Unit = if (columns.nonEmpty) {
    if (columns.distinct.size != columns.size) OptionError(s"dedup: duplicate columns in ${columns.mkString(", ")}")
    columns.foreach { name =>
      // events.col resolves now: an unknown column fails with Spark's own AnalysisException.
      val field = input.events.select(input.events.col(name)).schema.head
      if (input.keys.contains(field.name)) OptionError(
        s"dedup: column '$name' is a key column; deduplication is per key already, list only the other columns " +
          "a duplicate repeats (e.g. a packet id)")
      if (!orderable(field.dataType)) OptionError(
        s"dedup: column '$name' of type ${field.dataType.sql} cannot be compared for equality (as in groupBy)")
    }
  }

  private def orderable(t: DataType): Boolean = t match {
    case _: MapType => false
    case s: StructType => s.fields.forall(f => orderable(f.dataType))
    case other => RowOrdering.isOrderable(other)
  }

  /** The per-row dedup values as one struct column. */
  def values(input: InputPlan, columns: Seq[String]): Column =
    F.struct(columns.map(input.events.col): _*)
}
