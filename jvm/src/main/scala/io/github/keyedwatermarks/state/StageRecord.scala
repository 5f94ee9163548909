package io.github.keyedwatermarks.state

import java.nio.charset.StandardCharsets

import scala.util.Try

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}
import org.apache.spark.sql.types.{DataType, StructType}

/**
 * What a keyed stage's state was written for (docs/semantics.md, "Upgrades"), kept in the
 * checkpoint beside the stage's state (`state/<operatorId>/_keyed_watermarks.json`), so that a
 * restart with an incompatible query is refused on the driver before its first micro-batch runs,
 * not in the first batch that reads a key's stored windows (the per-key check of [[KeyState]],
 * which stays as the second line of defence). It holds what that per-key check compares: the
 * window spec, the schema of an open window's row (the aggregation buffers), the release that
 * wrote it; the key columns; and what Spark's global watermark, of which the checkpoint keeps one
 * value, measures for the stage (`globalWatermark`: [[StageRecord.EventTime]] for max_skew and
 * closing, [[StageRecord.ArrivalTime]] for the idle options on the arrival clock, None for neither
 * or a record written before the field existed), since that value would change meaning.
 *
 * `batch` is the micro-batch in whose planning the record was written. It binds only once a
 * batch from `batch` on has committed: a first run whose first batch fails before it commits
 * (or a checkpoint of a release before the record, whose stored keys may be of another query)
 * leaves a record that the next run overwrites rather than obeys.
 */
private[keyedwatermarks] final case class StageRecord(
    release: StateRelease.Release, windows: String, windowRows: StructType, keys: Seq[String], batch: Long,
    globalWatermark: Option[String] = None) {

  def toJson: String = {
    val mapper = new ObjectMapper()
    val node = mapper.createObjectNode()
    node.put("release", release.toString)
    node.put("windows", windows)
    node.put("window_rows", windowRows.json)
    val keyNodes = node.putArray("keys")
    keys.foreach(keyNodes.add)
    node.put("batch", batch)
    globalWatermark.foreach(node.put("global_watermark", _))
    mapper.writerWithDefaultPrettyPrinter().writeValueAsString(node)
  }

  /** The same query as `that` for the state (the batch that wrote it aside). */
  def sameStageAs(that: StageRecord): Boolean =
    windows == that.windows && windowRows == that.windowRows && keys == that.keys &&
      globalWatermark == that.globalWatermark
}

private[keyedwatermarks] object StageRecord {
  val FileName = "_keyed_watermarks.json"

  /** The record this release writes for a stage of this window spec, window rows and keys. */
  def current(
      windows: String, windowRows: StructType, keys: Seq[String], batch: Long,
      globalWatermark: Option[String] = None): StageRecord =
    StageRecord(StateRelease.Current, windows, windowRows, keys, batch, globalWatermark)

  /** `global_watermark`: Spark's global watermark on event time (max_skew, closing='global' / 'fleet'). */
  val EventTime = "event_time"

  /** `global_watermark`: on the arrival time (the idle options on the arrival clock, arrival_time). */
  val ArrivalTime = "arrival_time"

  def fromJson(json: String): StageRecord = {
    val node = new ObjectMapper().readTree(json)
    def text(field: String) = {
      val v = node.get(field)
      if (v == null || !v.isTextual) throw new IllegalStateException(s"no $field")
      v.asText()
    }
    val keys = Option(node.get("keys")).filter(_.isArray)
      .getOrElse(throw new IllegalStateException("no keys"))
    StageRecord(StateRelease.parse(text("release")), text("windows"),
      DataType.fromJson(text("window_rows")).asInstanceOf[StructType],
      (0 until keys.size).map(keys.get(_).asText()), node.get("batch").asLong(),
      Option(node.get("global_watermark")).filter(_.isTextual).map(_.asText()))
  }

  /** What to do with the record in the checkpoint before the first micro-batch of a run. */
  sealed trait Decision
  /** The record binds and this query matches it. */
  case object Resume extends Decision
  /** No record, or one that does not bind yet: write this query's. */
  final case class Write(record: StageRecord) extends Decision
  /** The record binds and this query is not the one the state was written for. */
  final case class Refuse(message: String) extends Decision

  /**
   * `stored`: the record in the checkpoint (if any); `lastCommit`: the checkpoint's last
   * committed micro-batch (if any); `query`: this query's record, written at the batch planned.
   */
  def decide(stored: Option[StageRecord], lastCommit: Option[Long], query: StageRecord, what: String): Decision =
    stored match {
      case None => Write(query)
      case Some(s) if !lastCommit.exists(_ >= s.batch) =>
        // Not bound: written in a batch that never committed. Kept if it is this query's.
        if (s.sameStageAs(query)) Resume else Write(query)
      case Some(s) =>
        refusal(s, query, what) match {
          case Some(message) => Refuse(message)
          case None => Resume
        }
    }

  /**
   * The refusal of `query` over state written for `stored`, in the words of the per-key check
   * ([[KeyState]], catalyst.UnsafeRowBytes.RowsCodec), naming both sides.
   */
  private def refusal(stored: StageRecord, query: StageRecord, what: String): Option[String] = {
    val restart = "restart it from a new checkpoint location"
    if (stored.release > query.release) {
      Some(Try(StateRelease.requireReadable(stored.release.stamp, what, query.release)).failed.get.getMessage)
    } else if (stored.keys != query.keys) {
      Some(s"$what: written for other key columns (${stored.keys.mkString(", ")}) than this query's " +
        s"(${query.keys.mkString(", ")}); $restart")
    } else if (stored.windowRows != query.windowRows) {
      Some(s"$what: written for another schema (other aggregates, or another version of keyed-watermarks) " +
        s"than this query's: the state's open windows hold ${describe(stored.windowRows)}, this query's " +
        s"${describe(query.windowRows)}; $restart")
    } else if (stored.windows != query.windows) {
      Some(s"$what: written for another window spec (window size, slide, or session gap kind) than this " +
        s"query's ${query.windows} (the state's: ${stored.windows}); $restart")
    } else (stored.globalWatermark, query.globalWatermark) match {
      case (Some(was), Some(is)) if was != is =>
        Some(s"$what: written by a stage whose Spark global watermark (one value, kept in the checkpoint) " +
          s"is ${measures(was)}, but this query's is ${measures(is)}: the value would change meaning; $restart")
      case _ => None
    }
  }

  private def measures(globalWatermark: String): String = globalWatermark match {
    case EventTime => "on event time (max_skew / closing)"
    case ArrivalTime =>
      "on the arrival time (arrival_time: idle_timeout, advance_when_idle or source_idle_timeout on the arrival clock)"
    case other => other
  }

  /** An open window's row by its fields, without the fields every query's rows have. */
  private def describe(rows: StructType): String =
    rows.fields.filterNot(f => OpenWindowRows.CommonFields.exists(_.name == f.name))
      .map(f => s"${f.name} ${f.dataType.simpleString}").mkString("(", ", ", ")")

  /**
   * Reads, decides and (when the decision is to write) writes the record of the stage whose
   * state is under `stateDir` (`<checkpoint>/state/<operatorId>`); throws the refusal.
   * Checkpoints are on Hadoop file systems: the record is written beside and renamed into place.
   */
  def check(stateDir: Path, query: StageRecord, hadoopConf: Configuration): Unit = {
    val fs = stateDir.getFileSystem(hadoopConf)
    val file = new Path(stateDir, FileName)
    val root = stateDir.getParent.getParent
    val what = s"the keyed stage's state in the checkpoint (state/${stateDir.getName})"
    val stored =
      if (!fs.exists(file)) None
      else {
        val in = fs.open(file)
        val json =
          try new String(in.readAllBytes(), StandardCharsets.UTF_8)
          finally in.close()
        Some(Try(fromJson(json)).getOrElse(throw new IllegalStateException(
              s"$what: its record $file is unreadable; restart the query from a new checkpoint location")))
      }
    decide(stored, lastCommit(fs, new Path(root, "commits")), query, what) match {
      case Resume =>
      case Refuse(message) => throw new IllegalStateException(message)
      case Write(record) =>
        fs.mkdirs(stateDir)
        val temp = new Path(stateDir, s".$FileName.${java.util.UUID.randomUUID()}.tmp")
        val out = fs.create(temp, true)
        try out.write(record.toJson.getBytes(StandardCharsets.UTF_8))
        finally out.close()
        fs.delete(file, false)
        if (!fs.rename(temp, file)) throw new IllegalStateException(s"could not write $file")
    }
  }

  /** The last micro-batch in Spark's commit log (files named by batch id). */
  private def lastCommit(fs: FileSystem, commits: Path): Option[Long] =
    if (!fs.exists(commits)) None
    else fs.listStatus(commits).map(_.getPath.getName).filter(n => n.nonEmpty && n.forall(_.isDigit))
      .map(_.toLong).maxOption
}
