// keyed-watermarks: per-key event-time watermarks for Spark Structured Streaming.
val sparkVersion = "4.3.0"

// Spark 4.3.0 is compiled against as `provided`. Maven Central does not serve the 4.3.0 Spark
// artifacts (only up to 4.2.0 resolve there), so the build takes the very same jars from the
// pyspark==4.3.0 wheel that dev/setup installs into .venv (override with KW_SPARK_JARS).
lazy val sparkJars = settingKey[File]("directory holding Spark's jars (pyspark/jars)")

def findSparkJars(base: File): File = {
  val fromEnv = sys.env.get("KW_SPARK_JARS").map(file)
  val fromVenv = (base / ".venv" / "lib" * "python3*" / "site-packages" / "pyspark" / "jars").get.headOption
  val dir = fromEnv.orElse(fromVenv).getOrElse(
    sys.error("Spark jars not found: run dev/setup (creates .venv with pyspark) or set KW_SPARK_JARS"))
  val expected = dir / s"spark-sql_2.13-$sparkVersion.jar"
  if (!expected.exists()) sys.error(s"$dir has no spark-sql_2.13-$sparkVersion.jar; install pyspark==$sparkVersion")
  dir
}

ThisBuild / organization := "io.github.keyedwatermarks"
ThisBuild / version := "0.1.0"
ThisBuild / scalaVersion := "2.13.18"
ThisBuild / javacOptions ++= Seq("--release", "17")
ThisBuild / scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature", "-Xlint:-unused,_")

// Spark starts inside forked test/benchmark JVMs, which need the same --add-opens as spark-submit.
lazy val sparkJavaOptions = Seq(
  "-Xmx4g",
  "-XX:+IgnoreUnrecognizedVMOptions",
  "--add-opens=java.base/java.lang=ALL-UNNAMED",
  "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
  "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
  "--add-opens=java.base/java.io=ALL-UNNAMED",
  "--add-opens=java.base/java.net=ALL-UNNAMED",
  "--add-opens=java.base/java.nio=ALL-UNNAMED",
  "--add-opens=java.base/java.util=ALL-UNNAMED",
  "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
  "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
  "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
  "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
  "--add-opens=java.base/sun.nio.cs=ALL-UNNAMED",
  "--add-opens=java.base/sun.security.action=ALL-UNNAMED",
  "--add-opens=java.base/sun.util.calendar=ALL-UNNAMED",
  "-Djdk.reflect.useDirectMethodHandle=false",
  "-Dio.netty.tryReflectionSetAccessible=true"
)

lazy val core = (project in file("jvm"))
  .settings(
    name := "keyed-watermarks",
    libraryDependencies ++= Seq(
      "org.scalatest" %% "scalatest" % "3.2.19" % Test
    ),
    sparkJars := findSparkJars((ThisBuild / baseDirectory).value),
    // Provided: on the compile and test classpaths, never packaged.
    Compile / unmanagedJars ++= (sparkJars.value * "*.jar").classpath,
    Test / fork := true,
    Test / javaOptions ++= sparkJavaOptions,
    Test / parallelExecution := false,
    Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oD")
  )

// JMH microbenchmarks of the JVM hot paths (benchmarks/jmh, see benchmarks/README.md):
//   ./dev/sbt "jmh/Jmh/run -i 3 -wi 2 -f 1 -t 1"
// Not aggregated by root, so `sbt test` / `core/test` never build it. The JMH runner runs in a
// forked JVM with Spark's --add-opens flags; JMH's own benchmark forks inherit the runner's
// JVM arguments (JMH's default when no -jvmArgs is given).
lazy val jmh = (project in file("benchmarks/jmh"))
  .enablePlugins(JmhPlugin)
  .dependsOn(core)
  .settings(
    name := "keyed-watermarks-jmh",
    publish / skip := true,
    sparkJars := findSparkJars((ThisBuild / baseDirectory).value),
    Compile / unmanagedJars ++= (sparkJars.value * "*.jar").classpath,
    Jmh / run / fork := true,
    Jmh / run / javaOptions ++= sparkJavaOptions
  )

lazy val root = (project in file("."))
  .aggregate(core)
  .settings(publish / skip := true)
