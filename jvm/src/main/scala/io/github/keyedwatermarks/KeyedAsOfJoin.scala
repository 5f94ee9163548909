package io.github.keyedwatermarks

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.DataFrame

import io.github.keyedwatermarks.join.AsOfJoinPlan

/**
 * The Scala API of the per-key as-of join (docs/semantics.md, "As-of join"): each reading
 * joined to the version of its key valid at the reading's event time, held until the versions
 * stream's watermark (max version time - `versionsDelay`) passes it; a key's lateness is its
 * own (max reading time - `lateness`). `name` names the join's metrics (`keyed_watermarks_join.<name>`;
 * docs/joins.md, "Metrics"). Bad input fails here, before any query starts.
 *
 * {{{
 * import io.github.keyedwatermarks.KeyedAsOfJoin
 * val joined = KeyedAsOfJoin(readings, versions, Seq("device"), "ts", "valid_from",
 *   lateness = "10 minutes", versionsDelay = "1 minute")
 * }}}
 */
object KeyedAsOfJoin {
  def apply(readings: DataFrame, versions: DataFrame, keys: Seq[String], readingTime: String, versionTime: String,
      lateness: String, versionsDelay: String, name: Option[String] = None): DataFrame =
    AsOfJoinPlan.plan(readings, versions, keys, readingTime, versionTime, lateness, versionsDelay, name)

  /** The same, for py4j (a Java list of key names; `name` null for none). */
  def fromPython(readings: DataFrame, versions: DataFrame, keys: java.util.List[String], readingTime: String,
      versionTime: String, lateness: String, versionsDelay: String, name: String): DataFrame =
    apply(readings, versions, keys.asScala.toSeq, readingTime, versionTime, lateness, versionsDelay, Option(name))
}
