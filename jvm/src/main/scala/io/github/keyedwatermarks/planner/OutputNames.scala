package io.github.keyedwatermarks.planner

import java.util.Locale

import org.apache.spark.sql.types.StructType

import io.github.keyedwatermarks.emission.{Pane, WindowEmitter}
import io.github.keyedwatermarks.spec.KeyedQuerySpec

/**
 * The result's column names must be unique: a key named `window`, an aggregate alias equal to
 * a key, to `window` or to another alias would otherwise build, then fail when the query
 * starts with an optimizer error. Compared as Spark compares names (case-insensitively unless
 * `spark.sql.caseSensitive`; here always case-insensitively, which is the stricter rule).
 */
private[planner] object OutputNames {
  def check(result: StructType, keyCount: Int, spec: KeyedQuerySpec): Unit = {
    // The report columns are always there inside the plan (`.agg` drops them at the end).
    val panes = if (spec.emission.withPaneColumns) Seq(Pane.PaneColumn, Pane.PaneIndexColumn) else Nil
    val revision =
      if (spec.windows.allowedLateness.isDefined && panes.isEmpty) Seq(WindowEmitter.RevisionColumn) else Nil
    val retraction = if (spec.emission.retracting) Seq(Pane.RetractionColumn) else Nil
    val added = revision ++ panes ++ retraction ++ WindowEmitter.ReportColumns
    val names = result.fieldNames.toSeq ++ added
    def role(i: Int): String =
      if (i < keyCount) "key" else if (i == keyCount) "window" else if (i < result.length) "aggregate" else "added"
    val seen = scala.collection.mutable.Map.empty[String, Int]
    names.zipWithIndex.foreach { case (name, i) =>
      seen.get(name.toLowerCase(Locale.ROOT)) match {
        case Some(first) => throw new IllegalArgumentException(
            s"agg: the result would have two columns named '$name' (the ${role(first)} column " +
              s"'${names(first)}' and the ${role(i)} column '$name'); rename one, e.g. with .alias(...)")
        case None => seen(name.toLowerCase(Locale.ROOT)) = i
      }
    }
  }
}
