// JMH microbenchmarks (benchmarks/jmh): sbt-jmh from Maven Central.
addSbtPlugin("pl.project13.scala" % "sbt-jmh" % "0.4.7")
