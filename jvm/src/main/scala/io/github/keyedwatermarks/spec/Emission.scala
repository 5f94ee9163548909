package io.github.keyedwatermarks.spec

/**
 * When a window's results are emitted, and what each repeated result (pane) holds
 * (docs/semantics.md, "Panes and accumulation"). One option, `emit`, with the Beam/Flink
 * accumulation mode beside it; matches over both are exhaustive.
 */
final case class Emission(when: Emission.When, accumulation: Emission.Accumulation) {
  import Emission._

  /** Whether output rows carry pane columns (`kw_pane`, `kw_pane_index`): not for `final`. */
  def withPaneColumns: Boolean = when match {
    case Final => false
    case EveryBatch | _: EveryInterval => true
  }

  /**
   * The processing time (ms) that must pass between a window's panes before it fires an early
   * (or, for a session that grew past the watermark, a late) pane: 0 unless `every <duration>`.
   */
  val earlyPaneIntervalMs: Long = when match {
    case EveryInterval(interval) => interval.millis
    case Final | EveryBatch => 0L
  }

  /** Whether a window fires before its key's watermark passes its end. */
  def early: Boolean = withPaneColumns

  def retracting: Boolean = accumulation == Retracting

  def discarding: Boolean = accumulation == Discarding

  /**
   * Checks the combination against the windows, before any query starts: emit='final' repeats
   * the whole window only, and emit='every <duration>' is not supported for sessions yet; the
   * others are defined for every kind of window (sessions: docs/semantics.md, "Early panes of
   * sessions").
   */
  def validate(windows: WindowSpec): Unit = {
    val name = when.name
    when match {
      case Final =>
        if (accumulation != Accumulating) OptionError(
          s"accumulation: '${accumulation.name}' needs repeated panes: emit='every_batch' (with emit='final' a " +
            "window fires once, plus revisions within allowed_lateness, each the whole window)")
      case EveryBatch => ()
      case EveryInterval(_) => windows match {
          case _: Sessions => OptionError(
              s"emit: '$name' is not supported for session windows yet (a merge would have to hold the " +
                "retractions of the sessions it replaces until its pane fires); use emit='every_batch'")
          case _: Tumbling | _: Sliding => ()
        }
    }
  }
}

object Emission {
  sealed abstract class When(val name: String) extends Serializable
  /** One firing when the key's watermark passes the window's end, plus late revisions: today's rule. */
  case object Final extends When("final")
  /** Also an early pane at the end of every micro-batch in which the window changed. */
  case object EveryBatch extends When("every_batch")
  /**
   * Early panes at most once per `interval` of processing time (the micro-batch's timestamp)
   * per window: a change waits for a later batch of its key (or the on-time pane).
   */
  final case class EveryInterval(interval: DurationOption) extends When(s"every ${interval.text}")

  sealed abstract class Accumulation(val name: String) extends Serializable
  /** Each pane is the whole window so far. */
  case object Accumulating extends Accumulation("accumulating")
  /** Each pane holds only the rows since the window's previous pane. */
  case object Discarding extends Accumulation("discarding")
  /** Each pane is the whole window, preceded by a retraction of the window's previous pane. */
  case object Retracting extends Accumulation("retracting")

  val Default: Emission = Emission(Final, Accumulating)

  private val Whens = Seq(Final, EveryBatch)
  private val Accumulations = Seq(Accumulating, Discarding, Retracting)

  def when(text: String): When = Whens.find(_.name == text).getOrElse {
    val every = text.trim
    if (every.startsWith("every ")) EveryInterval(DurationOption.positive("emit", every.stripPrefix("every ").trim))
    else OptionError(
      s"emit: expected ${Whens.map(w => s"'${w.name}'").mkString(", ")} or 'every <duration>' (e.g. " +
        s"'every 10 seconds'), got '$text'")
  }

  def accumulation(text: String): Accumulation = OptionError.choice("accumulation", text, Accumulations)(_.name)

  /** The option values as the user wrote them (None: the default). */
  def of(emit: Option[String], accumulation: Option[String]): Emission =
    Emission(emit.map(when).getOrElse(Final), accumulation.map(Emission.accumulation).getOrElse(Accumulating))
}
