package io.github.keyedwatermarks.python

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{Column, DataFrame}

import io.github.keyedwatermarks.planner.{KeyedPlanner, SpecChecks}
import io.github.keyedwatermarks.spec.QueryOptions

/**
 * The py4j entry point of the Python wrapper (as GraphFrames' `GraphFramePythonAPI`): plain
 * signatures only. Python converts its arguments (durations to Spark duration strings, the
 * keyword arguments to one JSON object, Columns to JVM Columns) and every rule is applied
 * here, by [[QueryOptions]], the same code the Spark Connect plugin runs.
 */
object PythonAPI {

  /** Checks the watermark options against `events` (`kw.keyed_watermark(...)` fails early). */
  def validateWatermark(events: DataFrame, options: String, columns: java.util.Map[String, Column]): Unit =
    SpecChecks.watermark(QueryOptions.watermark(options, columns), events)

  /** Checks the window options (`.window(...)`, `.session(...)` fail early). */
  def validateWindows(events: DataFrame, options: String, columns: java.util.Map[String, Column]): Unit =
    SpecChecks.windows(QueryOptions.windows(options, columns), events)

  /** The streaming result (`.agg(...)`, or the report stream with "report": true). */
  def plan(
      events: DataFrame,
      options: String,
      columns: java.util.Map[String, Column],
      aggregates: java.util.List[Column]): DataFrame =
    KeyedPlanner.plan(events, QueryOptions.query(options, columns, aggregates.asScala.toSeq))
}
