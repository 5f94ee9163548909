package io.github.keyedwatermarks.watermark

import org.apache.spark.sql.streaming.TimerValues

/**
 * "Now" for the idle rules (idle_timeout, advance_when_idle, source_idle_timeout) and the
 * wall-clock floors, in milliseconds: on the arrival clock Spark's global watermark defined on
 * the arrival time (the max arrival of the earlier micro-batches; 0 before the first), whose
 * timers are event-time timers; otherwise the micro-batch's processing time (processing-time
 * timers). The operator asks this instead of the processing time.
 */
private[keyedwatermarks] object IdleClockNow {
  def apply(policy: WatermarkPolicy, timerValues: TimerValues): Long =
    if (policy.usesArrivalClock) math.max(0L, timerValues.getCurrentWatermarkInMs())
    else timerValues.getCurrentProcessingTimeInMs()
}
