package io.github.keyedwatermarks.operator

import org.apache.spark.sql.types.StructType

import io.github.keyedwatermarks.catalyst.CatalystAggregation
import io.github.keyedwatermarks.emission.{PaneRule, WindowEmitter}
import io.github.keyedwatermarks.state.OpenWindowRows
import io.github.keyedwatermarks.watermark.WatermarkPolicy
import io.github.keyedwatermarks.window.WindowAssigner

/** Everything the operator needs, fixed when the query is defined (serialized to executors). */
private[keyedwatermarks] final case class OperatorPlan(
    keySchema: StructType,
    /** Schema of a partial's payload (see partials.PartialColumns). */
    payloadSchema: StructType,
    windows: WindowAssigner,
    policy: WatermarkPolicy,
    allowedLatenessMicros: Long,
    keepLateRows: Boolean,
    aggregation: CatalystAggregation,
    emitter: WindowEmitter,
    /** When windows fire and what repeated panes hold (emission.Firing). */
    panes: PaneRule,
    /** What an open window's row in state holds (planner.PaneRules.windowRows). */
    windowRows: OpenWindowRows,
    /** Per-key deduplication (option `dedup`): partials carry their row's dedup values. */
    dedup: Boolean = false,
    /** The key columns' names in the query (those of `keySchema` are positional). */
    keyNames: Seq[String] = Nil,
    /** Option metrics="keys": every key handled is added to its task's tally (emission.KeyTally). */
    keyMetrics: Boolean = true,
    /** Names this operator's tallies in its tasks (emission.KeyTallyRelay takes them). */
    tallyId: String = "",
    /**
     * Option `real_time`: each partial (one row's, see partials.RowPartials) is a step of its own:
     * late against the key's watermark before it, then the windows the watermark passes fire.
     */
    perRow: Boolean = false)
