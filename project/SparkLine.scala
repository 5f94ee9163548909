/**
 * A Spark minor line keyed-watermarks builds a jar for: the release compiled against (as
 * `provided`) and whether its jars come from the pyspark wheel instead of Maven Central.
 * Spark's internal APIs change between minor versions, not patch releases, so one jar per minor
 * line serves every patch release of it.
 */
final case class SparkLine(minor: String, release: String, fromPyspark: Boolean) {
  /** sbt project id: core40, core41, ...; the main line is plain `core`. */
  def projectId(main: Boolean): String = if (main) "core" else "core" + minor.replace(".", "")

  /**
   * This line's shim folders below `root` (jvm/src/main or jvm/src/test): `scala-spark-<minor>`,
   * and every `scala-spark-<from>-<to>` whose range holds this line. A range folder keeps one
   * copy of a shim for an API that changed once and then stayed (e.g. `TwsTester`, from 4.2 on),
   * instead of the same file in each line's folder.
   */
  def shimFolders(root: java.io.File): Seq[java.io.File] = {
    import scala.math.Ordering.Implicits._
    val Range = """scala-spark-(\d+\.\d+)-(\d+\.\d+)""".r
    val holdsThisLine: String => Boolean = {
      case Range(from, to) =>
        SparkLine.order(from) <= SparkLine.order(minor) && SparkLine.order(minor) <= SparkLine.order(to)
      case _ => false
    }
    val ranges = Option(root.listFiles()).toSeq.flatten.filter(f => f.isDirectory && holdsThisLine(f.getName))
    new java.io.File(root, s"scala-spark-$minor") +: ranges.sortBy(_.getName)
  }
}

object SparkLine {
  /** "4.10" after "4.9": a minor version as (major, minor) numbers. */
  def order(minor: String): (Int, Int) = {
    val Array(a, b) = minor.split('.').map(_.toInt)
    (a, b)
  }
}
