package io.github.keyedwatermarks.planner

import io.github.keyedwatermarks.spec.{ColumnGap, FixedGap, Sessions, Sliding, Tumbling, WindowSpec}
import io.github.keyedwatermarks.window.{SessionWindows, SlidingWindows, TumblingWindows, WindowAssigner}

/** The engine's window assigner for a window spec (the exhaustive match the compiler checks). */
private[keyedwatermarks] object Assigners {
  def of(windows: WindowSpec): WindowAssigner = windows match {
    case Tumbling(size, _) => TumblingWindows(size.micros)
    case Sliding(size, slide, _) =>
      if (slide.micros == size.micros) TumblingWindows(size.micros) else SlidingWindows(size.micros, slide.micros)
    case Sessions(FixedGap(g), _) if !FixedGap(g).hasCalendarDays => SessionWindows(g.micros)
    case Sessions(FixedGap(_) | ColumnGap(_), _) => SessionWindows(0L, dynamicGap = true)
  }
}
