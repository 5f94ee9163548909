package io.github.keyedwatermarks.shims

/**
 * A keyed-watermarks jar runs only on the Spark minor version it is compiled against: the
 * operator calls Spark internals whose signatures change between minor versions, and a
 * mismatch would otherwise surface mid-query as a NoSuchMethodError (or worse, silently
 * differing behaviour). Checked once per query definition, at the facade's entry.
 */
private[keyedwatermarks] object SparkVersionCheck {

  def requireBuiltForRunningSpark(): Unit = check(org.apache.spark.SPARK_VERSION)

  private[shims] def check(running: String): Unit = {
    val minor = running.split('.').take(2).mkString(".")
    if (minor != BuiltFor.SparkMinor) throw new UnsupportedOperationException(
      s"this keyed-watermarks jar is built for Spark ${BuiltFor.SparkMinor}, but this is Spark $running: " +
        s"use keyed-watermarks-spark${minor}_2.13-<version>.jar (jars exist for Spark " +
        s"${BuiltFor.SparkLines.init.mkString(", ")} and ${BuiltFor.SparkLines.last}; " +
        "the Python package picks the right one: keyed_watermarks.configure(SparkSession.builder))")
  }
}
