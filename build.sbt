// keyed-watermarks: per-key event-time watermarks for Spark Structured Streaming.
//
// One jar per Spark minor version, all built from the same sources (jvm/src/main/scala; what
// touches Spark's internal APIs is in catalyst/, partials/ and shims/) plus, when a line needs
// one, a per-version folder (jvm/src/main/scala-spark-<minor>) or a range folder shared by
// several lines (scala-spark-<from>-<to>); the layout Spark
// libraries such as Delta use. shims.BuiltFor is generated per line. `./dev/sbt package` builds them all.

// The release, in one place: python/keyed_watermarks/VERSION (also read by python/pyproject.toml
// and keyed_watermarks.__version__).
ThisBuild / version := IO.read(file("python/keyed_watermarks/VERSION")).trim

// The Spark lines (project/SparkLine.scala). 4.0-4.2 from Maven Central. Maven Central does not serve the 4.3.0 artifacts (only up to 4.2.0
// resolve there), so 4.3 takes the very same jars from the pyspark==4.3.0 wheel that dev/setup
// installs into .venv (override with KW_SPARK_JARS).
lazy val sparkLines = Seq(
  SparkLine("4.0", "4.0.1", fromPyspark = false),
  SparkLine("4.1", "4.1.1", fromPyspark = false),
  SparkLine("4.2", "4.2.0", fromPyspark = false),
  SparkLine("4.3", "4.3.0", fromPyspark = true))
// The line the Scala tests and JMH benchmarks run on (project `core`).
lazy val mainLine = sparkLines.last

lazy val sparkJars = settingKey[File]("directory holding Spark's jars (pyspark/jars)")

def findSparkJars(base: File, release: String): File = {
  val fromEnv = sys.env.get("KW_SPARK_JARS").map(file)
  val fromVenv = (base / ".venv" / "lib" * "python3*" / "site-packages" / "pyspark" / "jars").get.headOption
  val dir = fromEnv.orElse(fromVenv).getOrElse(
    sys.error("Spark jars not found: run dev/setup (creates .venv with pyspark) or set KW_SPARK_JARS"))
  val expected = dir / s"spark-sql_2.13-$release.jar"
  if (!expected.exists()) sys.error(s"$dir has no spark-sql_2.13-$release.jar; install pyspark==$release")
  dir
}

ThisBuild / organization := "io.github.keyedwatermarks"
ThisBuild / description := "Per-key event-time watermarks for Spark Structured Streaming"
ThisBuild / licenses := Seq("Apache-2.0" -> url("https://www.apache.org/licenses/LICENSE-2.0.txt"))

// The release (dev/release): `sbt publish` writes each line's jar, sources jar, Scaladoc jar and
// POM, each with .md5 and .sha1, in Maven repository layout under build/release/maven
// (io/github/keyedwatermarks/keyed-watermarks-spark4.X_2.13/<version>/), ready for one upload.
ThisBuild / publishMavenStyle := true
ThisBuild / publishTo := Some(MavenCache("release", (ThisBuild / baseDirectory).value / "build" / "release" / "maven"))
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

/** Spark on the compile (and test) classpath, never packaged. */
def sparkDependency(line: SparkLine): Seq[Setting[_]] =
  if (line.fromPyspark) Seq(
    sparkJars := findSparkJars((ThisBuild / baseDirectory).value, line.release),
    Compile / unmanagedJars ++= (sparkJars.value * "*.jar").classpath)
  // spark-connect: the Connect plugin (connect/) compiles against the Connect server's jar
  // (which bundles its protobuf classes, hence intransitive).
  else Seq(libraryDependencies ++= Seq(
    "org.apache.spark" %% "spark-sql" % line.release % Provided,
    ("org.apache.spark" %% "spark-connect" % connectRelease(line) % Provided).intransitive()))

// Maven Central serves no spark-connect_2.13 4.1.0 or 4.1.1 ("Not found"); 4.1.2 has the same
// plugin API as the rest of the 4.1 line.
def connectRelease(line: SparkLine): String = if (line.minor == "4.1") "4.1.2" else line.release

/**
 * The POM of the line whose Spark comes from the pyspark wheel (unmanaged jars, so sbt writes no
 * dependency for it): Spark as `provided`, as the other lines' POMs have it.
 */
def providedSparkInPom(line: SparkLine): Seq[Setting[_]] =
  if (!line.fromPyspark) Nil
  else Seq(pomPostProcess := { (pom: scala.xml.Node) =>
    val spark = Seq("spark-sql" -> line.release, "spark-connect" -> connectRelease(line)).map { case (artifact, v) =>
      <dependency>
        <groupId>org.apache.spark</groupId>
        <artifactId>{artifact + "_2.13"}</artifactId>
        <version>{v}</version>
        <scope>provided</scope>
      </dependency>
    }
    new scala.xml.transform.RuleTransformer(new scala.xml.transform.RewriteRule {
      override def transform(n: scala.xml.Node): Seq[scala.xml.Node] = n match {
        case e: scala.xml.Elem if e.label == "dependencies" => e.copy(child = e.child ++ spark)
        case other => other
      }
    }).transform(pom).head
  })

/**
 * The jar for one Spark line: jar keyed-watermarks-spark<minor>_2.13-<version>.jar. Every line
 * shares jvm/ (sources, tests) with its own target folder, plus its own shim folders
 * (src/main/scala-spark-<minor>, and src/test/scala-spark-<minor> for test-only helpers whose
 * Spark API differs), and the range folders that hold it (scala-spark-<from>-<to>: a shim shared
 * by the lines of one API generation; SparkLine.shimFolders). Every line compiles the Scala tests; dev/test runs all of them on the main
 * line and the processing-time timer suite on the others (the Python suite covers the rest).
 */
def sparkProject(line: SparkLine): Project = {
  val main = line == mainLine
  Project(line.projectId(main), file("jvm"))
    .settings(sparkDependency(line))
    .settings(providedSparkInPom(line))
    .settings(
      name := s"keyed-watermarks-spark${line.minor}",
      moduleName := name.value, // keep the dot: sbt would normalize it to spark4-1
      target := baseDirectory.value / "target" / s"spark-${line.minor}",
      Compile / unmanagedSourceDirectories ++= line.shimFolders(baseDirectory.value / "src" / "main"),
      // shims.BuiltFor: the Spark line this jar is compiled against (shims.SparkVersionCheck).
      Compile / sourceGenerators += Def.task {
        val out = (Compile / sourceManaged).value / "io" / "github" / "keyedwatermarks" / "shims" / "BuiltFor.scala"
        IO.write(out,
          s"""package io.github.keyedwatermarks.shims
             |
             |/** The Spark minor version this jar is compiled against, and all the lines a jar exists for (generated by build.sbt). */
             |private[keyedwatermarks] object BuiltFor {
             |  val SparkMinor = "${line.minor}"
             |  val SparkLines: Seq[String] = Seq(${sparkLines.map(l => "\"" + l.minor + "\"").mkString(", ")})
             |}
             |""".stripMargin)
        Seq(out)
      }.taskValue,
      Test / unmanagedSourceDirectories ++= line.shimFolders(baseDirectory.value / "src" / "test"),
      libraryDependencies += "org.scalatest" %% "scalatest" % "3.2.19" % Test,
      // The in-memory operator harness drives Spark's TwsTester: compiled on the main line only
      // (4.0 and 4.1 have no TwsTester), where its Python tests run.
      Test / unmanagedSources / excludeFilter := (if (main) NothingFilter else "OperatorHarness.scala"),
      Test / fork := true,
      Test / javaOptions ++= sparkJavaOptions,
      Test / parallelExecution := false,
      Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oD"),
      // The release, read by state.StateRelease (stamped into the state it writes).
      Compile / resourceGenerators += Def.task {
        val f = (Compile / resourceManaged).value / "io" / "github" / "keyedwatermarks" / "release"
        IO.write(f, version.value + "\n")
        Seq(f)
      }.taskValue
    )
}

lazy val core = sparkProject(mainLine)
lazy val core40 = sparkProject(sparkLines(0))
lazy val core41 = sparkProject(sparkLines(1))
lazy val core42 = sparkProject(sparkLines(2))

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
    sparkJars := findSparkJars((ThisBuild / baseDirectory).value, mainLine.release),
    Compile / unmanagedJars ++= (sparkJars.value * "*.jar").classpath,
    Jmh / run / fork := true,
    Jmh / run / javaOptions ++= sparkJavaOptions
  )

lazy val root = (project in file("."))
  .aggregate(core, core40, core41, core42)
  // `sbt test`: the main line's tests (not every line's: dev/test picks what runs elsewhere).
  .settings(publish / skip := true, Test / test / aggregate := false, Test / test := (core / Test / test).value)
