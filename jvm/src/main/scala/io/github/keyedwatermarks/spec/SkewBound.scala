package io.github.keyedwatermarks.spec

/**
 * max_skew as chosen: how far a key's watermark may trail Spark's global watermark
 * (docs/semantics.md, "Bounded skew"); planner.WatermarkPolicies turns it into a
 * watermark.SkewFloor, or none.
 */
sealed trait SkewBound extends Serializable

/** [[WatermarkSpec.DefaultMaxSkewMicros]] where it applies (not with processing-time policies or closing='global'). */
case object DefaultSkew extends SkewBound

/** No bound (`max_skew="unbounded"`): a silent key keeps its state and its last window forever. */
case object Unbounded extends SkewBound

final case class SkewOf(micros: Long) extends SkewBound {
  require(micros >= 0, s"max_skew must not be negative, got $micros microseconds")
}

object SkewBound {
  /** A duration string, or "unbounded" (no bound). */
  def parse(text: String): SkewBound =
    if (text != null && text.trim.equalsIgnoreCase("unbounded")) Unbounded
    else SkewOf(DurationOption.nonNegative("max_skew", text).micros)
}
