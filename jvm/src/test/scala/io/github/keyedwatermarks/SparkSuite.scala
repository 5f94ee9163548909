package io.github.keyedwatermarks

import java.nio.file.Files

import org.apache.spark.sql.SparkSession
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * A local SparkSession configured as `kw.configure` does (the session extension, RocksDB state
 * store).
 *
 * Every test of a suite that runs streaming queries is tagged [[SparkSuite.RunsQueries]], so
 * that `./dev/test --quick` leaves them out by tag (`-l`), not by a hand-kept list of suites: a
 * suite that only uses the session for quick batch checks says so with `runsQueries = false`.
 */
trait SparkSuite extends AnyFunSuite with BeforeAndAfterAll {
  /** Whether the suite runs streaming queries (its tests then carry the tag RunsQueries). */
  protected def runsQueries: Boolean = true

  override def tags: Map[String, Set[String]] =
    if (!runsQueries) super.tags
    else testNames.iterator.map(n => n -> (super.tags.getOrElse(n, Set.empty) + SparkSuite.RunsQueries)).toMap

  /** Cores of the local master (also the number of shuffle partitions). */
  protected def cores: Int = 2
  /** Further session settings of a suite. */
  protected def extraConfig: Map[String, String] = Map.empty

  @transient lazy val spark: SparkSession = SparkSession.builder()
    .master(s"local[$cores]")
    .appName(getClass.getSimpleName)
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", cores.toString)
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.sql.extensions", io.github.keyedwatermarks.contract.Contract.ExtensionsClass)
    .config("spark.sql.streaming.stateStore.providerClass",
      "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    .config(extraConfig)
    .getOrCreate()

  private val tempDirs = scala.collection.mutable.ArrayBuffer.empty[java.io.File]

  def tempDir(): String = {
    val dir = Files.createTempDirectory("kw-test").toFile
    tempDirs += dir
    dir.toString
  }

  override def afterAll(): Unit = {
    spark.stop()
    tempDirs.foreach(org.apache.commons.io.FileUtils.deleteQuietly)
    super.afterAll()
  }
}

object SparkSuite {
  /** The tag of tests that run streaming queries (`./dev/test --quick` excludes it). */
  val RunsQueries = "io.github.keyedwatermarks.RunsQueries"
}
