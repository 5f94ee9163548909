package io.github.keyedwatermarks.shims

/** The Spark minor version this jar is compiled against (build.sbt builds one jar per line). */
private[keyedwatermarks] object BuiltFor {
  val SparkMinor = "4.2"
}
