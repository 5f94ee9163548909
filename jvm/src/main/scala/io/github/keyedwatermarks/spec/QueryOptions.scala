package io.github.keyedwatermarks.spec

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.apache.spark.sql.Column

/**
 * A [[KeyedQuerySpec]] from plain options: a JSON object of the Python API's keyword arguments
 * (durations already as Spark duration strings) plus the named Columns among them. This is the
 * one seam shared by the py4j wrapper and the Spark Connect plugin, so both get the same rules
 * and the same messages. Option names are the Python keywords, so errors name what users wrote:
 *
 * {{{
 * {"key": ["device"], "event_time": "ts", "lateness": "5 seconds", "max_skew": "10 minutes",
 *  "window": {"size": "1 minute", "slide": "30 seconds"}, "report": true, "keep_late_rows": true}
 * }}}
 * Columns: "key_lateness" (a per-row duration), "source", "gap" (a per-row session gap),
 * "arrival_time" (each row's arrival time, for the idle options on the arrival clock).
 */
object QueryOptions {
  private val mapper = new ObjectMapper()

  private val WatermarkOptions = Set("key", "event_time", "lateness", "idle_timeout", "key_lateness",
    "adaptive_lateness", "clock", "advance_when_idle", "max_skew", "closing", "sources", "source_idle_timeout",
    "max_ahead", "stuck_after", "name", "dedup", "metrics", "arrival_time", "idle_clock",
    "real_time")
  private val QueryLevel = WatermarkOptions ++ Set("window", "session", "report", "keep_late_rows")
  private val ColumnOptions = Set("key_lateness", "source", "gap", "arrival_time")

  /**
   * A join's keyword arguments (Connect): `key`, a name or a list of names, `names`, strings,
   * and `name`, the join's optional metrics name.
   */
  final case class JoinArguments(keys: Seq[String], strings: Map[String, String], name: Option[String]) {
    def apply(name: String): String = strings(name)
  }

  def joinArguments(json: String, names: Seq[String]): JoinArguments = {
    val o = new Options(parse(json), Map.empty, names.toSet + "key" + "name", "")
    def required[T](name: String, v: Option[T]): T = v.getOrElse(OptionError(s"$name: missing"))
    JoinArguments(required("key", o.strings("key")), names.map(n => n -> required(n, o.string(n))).toMap,
      o.string("name"))
  }

  /** The watermark part alone (validated eagerly by `keyed_watermark(...)`). */
  def watermark(json: String, columns: java.util.Map[String, Column]): WatermarkSpec =
    watermark(new Options(json, columns))

  /** The window part alone, for a query whose watermark part is already known. */
  def windows(json: String, columns: java.util.Map[String, Column]): WindowSpec = {
    val o = new Options(json, columns)
    val w = windows(o)
    emission(o, w)
    w
  }

  def query(json: String, columns: java.util.Map[String, Column], aggregates: Seq[Column]): KeyedQuerySpec = {
    val o = new Options(json, columns)
    val w = windows(o)
    KeyedQuerySpec(watermark(o), w,
      AggregationSpec(aggregates, o.bool("report").getOrElse(false), o.bool("keep_late_rows").getOrElse(false)),
      emission(o, w))
  }

  private def watermark(o: Options): WatermarkSpec = {
    val keys = o.strings("key").getOrElse(o.fail("key: at least one key column is required"))
    val eventTime = o.string("event_time").getOrElse(o.fail("event_time: a column name is required"))
    val lateness = o.string("lateness").map(DurationOption.nonNegative("lateness", _))
      .getOrElse(o.fail("lateness: a duration is required, e.g. '5 seconds'"))
    val mapping = o.node("key_lateness").filter(_.isObject).map { m =>
      KeyLateness.ByKey(m.properties().asScala.map { e =>
        e.getKey -> DurationOption.nonNegative(s"key_lateness['${e.getKey}']",
          o.text(s"key_lateness['${e.getKey}']", e.getValue))
      }.toMap)
    }
    val adaptive = o.node("adaptive_lateness").map { a =>
      val sub = o.nested("adaptive_lateness", a, Set("quantile", "min", "max", "relative_error"))
      KeyLateness.Adaptive(
        sub.double("quantile").getOrElse(KeyLateness.Adaptive.DefaultQuantile),
        DurationOption("adaptive_lateness.min", sub.string("min").getOrElse(KeyLateness.Adaptive.DefaultMin)),
        DurationOption("adaptive_lateness.max", sub.string("max").getOrElse(KeyLateness.Adaptive.DefaultMax)),
        sub.double("relative_error").getOrElse(KeyLateness.Adaptive.DefaultRelativeError))
    }
    val byColumn = o.column("key_lateness").map(KeyLateness.ByColumn)
    val keyLateness = Seq(byColumn, mapping, adaptive).flatten match {
      case Seq() => KeyLateness.Fixed
      case Seq(one) => one
      case _ => o.fail("key_lateness and adaptive_lateness: choose one way to set per-key lateness")
    }
    val clock = o.string("clock").fold[KeyClock](KeyClock.EventTime)(KeyClock.parse)
    val closing = o.string("closing").fold[Closing](Closing.Keyed)(Closing.parse)
    val sourceColumn = o.column("source")
    if (sourceColumn.isEmpty && o.node("sources").isDefined) o.fail("sources: needs the source column (source=...)")
    if (sourceColumn.isEmpty && o.node("source_idle_timeout").isDefined) o.fail(
      "source_idle_timeout: needs the source column (source=...)")
    WatermarkSpec(
      keys = keys,
      eventTime = eventTime,
      lateness = lateness,
      keyLateness = keyLateness,
      clock = clock,
      idleTimeout = o.string("idle_timeout").map(DurationOption.positive("idle_timeout", _)),
      advanceWhenIdle = o.bool("advance_when_idle").getOrElse(false),
      maxSkew = o.string("max_skew").map(SkewBound.parse).getOrElse(DefaultSkew),
      closing = closing,
      sources = sourceColumn.map(SourcesSpec(_, o.strings("sources").getOrElse(Nil),
          o.string("source_idle_timeout").map(DurationOption.positive("source_idle_timeout", _)))),
      maxAheadMicros = o.string("max_ahead").fold(Option(WatermarkSpec.DefaultMaxAheadMicros))(WatermarkSpec.maxAhead),
      stuckAfterMicros = o.string("stuck_after").map(DurationOption.nonNegative("stuck_after", _).micros)
        .getOrElse(WatermarkSpec.DefaultStuckAfterMicros),
      stageName = o.string("name"),
      dedup = o.strings("dedup").getOrElse(Nil),
      // With real_time the per-key metrics are off unless asked for (which it refuses).
      keyMetrics = o.string("metrics").fold(!o.bool("real_time").getOrElse(false))(WatermarkSpec.keyMetrics),
      metricsSet = o.string("metrics").isDefined,
      realTime = o.bool("real_time").getOrElse(false),
      arrivalTime = o.column("arrival_time"),
      idleClock = o.string("idle_clock").map(IdleClock.parse))
  }

  private def windows(o: Options): WindowSpec = (o.node("window"), o.node("session")) match {
    case (Some(w), None) =>
      val sub = o.nested("window", w, Set("size", "slide", "allowed_lateness") ++ EmissionOptions)
      val size =
        DurationOption("window", sub.string("size").getOrElse(o.fail("window: a size is required, e.g. '10 seconds'")))
      val allowed = sub.string("allowed_lateness").map(DurationOption("allowed_lateness", _))
      sub.string("slide").map(DurationOption("slide", _)).fold[WindowSpec](Tumbling(size, allowed))(Sliding(size, _,
          allowed))
    case (None, Some(s)) =>
      val sub = o.nested("session", s, Set("gap", "allowed_lateness") ++ EmissionOptions)
      val gap = (sub.string("gap"), o.column("gap")) match {
        case (Some(text), None) => FixedGap(DurationOption("gap", text))
        case (None, Some(column)) => ColumnGap(column)
        case _ => o.fail("gap: a duration or a column is required, e.g. '30 seconds'")
      }
      Sessions(gap, sub.string("allowed_lateness").map(DurationOption("allowed_lateness", _)))
    case (None, None) => o.fail("window: choose the windows, .window(size[, slide]) or .session(gap)")
    case (Some(_), Some(_)) => o.fail("window and session: choose one kind of window")
  }

  private val EmissionOptions = Set("emit", "accumulation")

  /** `emit` and `accumulation`, options of the window or session, checked against it. */
  private def emission(o: Options, windows: WindowSpec): Emission = {
    val (name, node) = o.node("window").map("window" -> _).getOrElse("session" -> o.node("session").get)
    val sub = o.nested(name, node, Set("size", "slide", "gap", "allowed_lateness") ++ EmissionOptions)
    val e = Emission.of(sub.string("emit"), sub.string("accumulation"))
    e.validate(windows)
    e
  }

  /** Typed access to one JSON object of options; every error names the option. */
  private final class Options(root: JsonNode, columns: Map[String, Column], known: Set[String], path: String) {
    def this(json: String, columns: java.util.Map[String, Column]) = this(
      QueryOptions.parse(json),
      Option(columns).map(_.asScala.toMap).getOrElse(Map.empty), QueryLevel, "")

    root.fieldNames().asScala.foreach { name =>
      if (!known.contains(name)) fail(s"${path}$name: unknown option; known: ${known.toSeq.sorted.mkString(", ")}")
    }
    columns.keys.foreach { name =>
      if (!ColumnOptions.contains(name)) fail(s"$name: unknown column option; known: ${ColumnOptions.mkString(", ")}")
    }

    def fail(message: String): Nothing = OptionError(message)

    def node(name: String): Option[JsonNode] = Option(root.get(name)).filterNot(_.isNull)
    def column(name: String): Option[Column] = columns.get(name).filter(_ != null)

    def nested(name: String, value: JsonNode, keys: Set[String]): Options = {
      if (!value.isObject) fail(s"$name: expected an object of options, got $value")
      new Options(value, columns, keys, s"$name.")
    }

    def text(name: String, v: JsonNode): String =
      if (v.isTextual) v.asText() else fail(s"$path$name: expected a string, got $v")

    def string(name: String): Option[String] = node(name).map(text(name, _))

    def strings(name: String): Option[Seq[String]] = node(name).map { v =>
      if (!v.isArray || v.isEmpty || !v.elements().asScala.forall(e => e.isTextual && e.asText().nonEmpty)) fail(
        s"$path$name: expected a non-empty list of names, got $v")
      v.elements().asScala.map(_.asText()).toSeq
    }

    def bool(name: String): Option[Boolean] = node(name).map { v =>
      if (v.isBoolean) v.asBoolean() else fail(s"$path$name: expected a bool, got $v")
    }

    def double(name: String): Option[Double] = node(name).map { v =>
      if (v.isNumber) v.asDouble() else fail(s"$path$name: expected a number, got $v")
    }
  }

  private def parse(json: String): JsonNode = {
    val node =
      try mapper.readTree(Option(json).getOrElse("{}"))
      catch {
        case e: Exception => OptionError(s"options: not a JSON object: ${e.getMessage}")
      }
    if (node == null || !node.isObject) OptionError(s"options: expected a JSON object, got $json")
    node
  }
}
