package io.github.keyedwatermarks.watermark

/**
 * What a key's own rows propose as its watermark at the end of a micro-batch (see
 * [[HeldWatermark]]: a proposal below the held watermark is not applied but counted as an
 * attempted regression).
 */
private[keyedwatermarks] sealed trait Proposal extends Serializable {
  /** Where the key's lateness comes from, if its rows propose anything. */
  def lateness: Option[LatenessSource]

  /** Min of inputs: a source silent this long stops holding its key back (a processing-time timer). */
  def sourceIdleTimeoutMillis: Option[Long] = None
}

private[keyedwatermarks] object Proposal {
  /** Nothing: the watermark follows a clock floor only (clock='processing_time', closing='global'). */
  case object ClockOnly extends Proposal {
    def lateness: Option[LatenessSource] = None
  }

  /** The key's max event time minus its lateness. */
  final case class OwnRows(source: LatenessSource) extends Proposal {
    def lateness: Option[LatenessSource] = Some(source)
  }

  /**
   * Min of inputs: the min over the key's sources that are not idle of (the source's max event
   * time minus the key's lateness); the max over all of them if all are idle.
   */
  final case class MinOfSources(source: LatenessSource, sources: SourcePolicy) extends Proposal {
    def lateness: Option[LatenessSource] = Some(source)
    override def sourceIdleTimeoutMillis: Option[Long] = sources.idleTimeoutMillis
  }
}

/** Where a key's lateness comes from. */
private[keyedwatermarks] sealed trait LatenessSource extends Serializable

/** The same `L` for every key. */
private[keyedwatermarks] case object FixedLateness extends LatenessSource

/**
 * From a column of the input (microseconds after projection; null means the default `L`): a
 * key's lateness is the largest value among its rows of its latest micro-batch.
 */
private[keyedwatermarks] case object ColumnLateness extends LatenessSource

/**
 * Learnt per key: the `quantile` of how far the key's rows trail its max event time (at the
 * end of the row's micro-batch), from a bounded quantile sketch, clamped to [min, max].
 */
private[keyedwatermarks] final case class AdaptiveLateness(quantile: Double, minMicros: Long, maxMicros: Long,
    relativeError: Double)
    extends LatenessSource {
  require(quantile > 0 && quantile <= 1, s"quantile must be in (0, 1], got $quantile")
  require(minMicros >= 0 && minMicros <= maxMicros, s"need 0 <= min <= max, got $minMicros, $maxMicros")
}

/**
 * Min of inputs: `expected` sources (possibly empty: the sources seen so far) must all have
 * reported before the key has a watermark; a source silent for `idleTimeoutMillis` stops
 * holding its key back.
 */
private[keyedwatermarks] final case class SourcePolicy(expected: Seq[String], idleTimeoutMillis: Option[Long])
    extends Serializable
