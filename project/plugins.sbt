// JMH microbenchmarks (benchmarks/jmh): sbt-jmh from Maven Central.
addSbtPlugin("pl.project13.scala" % "sbt-jmh" % "0.4.7")
// Scala formatting (.scalafmt.conf), checked by dev/lint: sbt-scalafmt from Maven Central.
addSbtPlugin("org.scalameta" % "sbt-scalafmt" % "2.5.2")
