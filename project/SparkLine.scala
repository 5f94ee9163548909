/**
 * A Spark minor line keyed-watermarks builds a jar for: the release compiled against (as
 * `provided`) and whether its jars come from the pyspark wheel instead of Maven Central.
 * Spark's internal APIs change between minor versions, not patch releases, so one jar per minor
 * line serves every patch release of it.
 */
final case class SparkLine(minor: String, release: String, fromPyspark: Boolean) {
  /** sbt project id: core40, core41, ...; the main line is plain `core`. */
  def projectId(main: Boolean): String = if (main) "core" else "core" + minor.replace(".", "")
}
