package io.github.keyedwatermarks.input

import org.apache.spark.sql.{Column, DataFrame, functions => F}
import org.apache.spark.sql.types.{StructType, TimestampType}

import io.github.keyedwatermarks.contract.Contract
import io.github.keyedwatermarks.catalyst.{BatchConstant, SparkInternals}

/**
 * Validates the user's input and prepares the rows the operator consumes: the key columns,
 * the event time in microseconds, and only the columns the aggregates read. Rows that cannot
 * be aggregated (null key, null event time, null source, a session gap ending before the row)
 * get an invalid-reason code here (see InvalidRows); the partial aggregation counts them
 * (observed metrics) and never aggregates them.
 */
private[keyedwatermarks] final case class InputPlan(
    events: DataFrame,
    keys: Seq[String],
    eventTime: String,
    keyColumns: Seq[Column],
    eventTimeColumn: Column,
    /** The user's columns (what a kept late or invalid row holds). */
    userColumns: Seq[String])

private[keyedwatermarks] object InputPlan {
  /** Name of the internal event-time column (microseconds since the epoch). */
  val EventTimeMicros = "__kw_event_time_us"
  val InputMetrics: String = Contract.InputMetrics

  /** `streaming = false` only for the in-memory operator tests, which plan one micro-batch at a time. */
  def validate(events: DataFrame, keys: Seq[String], eventTime: String, streaming: Boolean = true): InputPlan = {
    if (events == null) throw new IllegalArgumentException("events: a streaming DataFrame is required")
    if (streaming && !events.isStreaming) throw new IllegalArgumentException(
      "events: keyed watermarks need a streaming DataFrame (spark.readStream...); " +
        "for a batch DataFrame use groupBy(key, window(...)).agg(...)")
    if (keys == null || keys.isEmpty) throw new IllegalArgumentException("key: at least one key column is required")
    keys.foreach(k => if (k == null || k.isEmpty) throw new IllegalArgumentException("key: empty column name"))
    if (keys.distinct.size != keys.size)
      throw new IllegalArgumentException(s"key: duplicate columns in ${keys.mkString(", ")}")
    if (eventTime == null || eventTime.isEmpty)
      throw new IllegalArgumentException("event_time: a column name is required")
    // events.col resolves each name now, so an unknown column fails here with Spark's own
    // AnalysisException (UNRESOLVED_COLUMN), before any query starts.
    val keyColumns = keys.map(events.col)
    val eventTimeColumn = events.col(eventTime)
    val eventTimeType = events.select(eventTimeColumn).schema.head.dataType
    if (eventTimeType != TimestampType) throw new IllegalArgumentException(
      s"event_time: column '$eventTime' must be of type TIMESTAMP, but it is ${eventTimeType.sql}; " +
        s"cast it first, e.g. F.col('$eventTime').cast('timestamp')")
    // Names as Spark resolved them: "`a.b`" (a column whose name has a dot) is the column a.b,
    // as in groupBy; the result's columns carry these names.
    def resolvedName(c: Column) = events.select(c).schema.head.name
    val keyNames = keyColumns.map(resolvedName)
    val eventTimeName = resolvedName(eventTimeColumn)
    if (keyNames.contains(eventTimeName)) throw new IllegalArgumentException(
      s"event_time: column '$eventTime' is also a key column")
    if (keyNames.distinct.size != keyNames.size) throw new IllegalArgumentException(
      s"key: duplicate columns in ${keys.mkString(", ")}")
    InputPlan(events, keyNames, eventTimeName, keyColumns, eventTimeColumn, events.columns.toSeq)
  }

  /**
   * Rows further ahead of the micro-batch's processing time (Spark's batch timestamp, as
   * `current_timestamp()` gives it in a streaming query) than `maxAheadMicros`: invalid. The
   * threshold is a [[BatchConstant]], so a new batch timestamp does not mean new generated code.
   */
  def tooFarAhead(eventTime: Column, maxAheadMicros: Long): Column =
    F.unix_micros(eventTime) > BatchConstant(F.unix_micros(F.current_timestamp()) + F.lit(maxAheadMicros))
}

/**
 * The projected input: key columns, event time (micros), the aggregates' input columns, the
 * policy's columns, the invalid-reason code and, when late rows are kept, the whole original
 * row as a struct (last column).
 */
private[keyedwatermarks] final case class ProjectedInput(
    frame: DataFrame,
    keySchema: StructType,
    invalidRows: Option[DataFrame])

private[keyedwatermarks] object ProjectedInput {
  /** Key columns are renamed to Avro-safe names: they become the state store's key schema. */
  def keyColumnName(i: Int): String = s"kw_key_$i"

  /** Name of the struct column holding the original row, when late rows are kept. */
  val OriginalRow = "kw_original_row"
  val InvalidReason = "kw_invalid_reason"
  /** Per input row: 0 (valid) or the [[InvalidRows]] reason it is not aggregated. */
  val InvalidReasonCode = "kw_invalid_code"

  private def column(plan: InputPlan, name: String) = plan.events.col("`" + name.replace("`", "``") + "`")

  /**
   * @param policyColumns named columns the watermark policy reads (per-row lateness, source),
   *                      placed after the aggregates' inputs
   * @param source        min of inputs: rows with a null source are invalid (counted, never
   *                      aggregated), as rows with a null key are
   * @param latenessMicros per-key lateness from a column: rows with an unparsable or negative
   *                      value are invalid
   * @param maxAheadMicros rows further ahead of processing time than this are invalid
   */
  def apply(
      plan: InputPlan,
      aggregateInputs: Seq[String],
      keepRows: Boolean,
      policyColumns: Seq[Column] = Nil,
      source: Option[Column] = None,
      rowSessionEnd: Option[Column] = None,
      latenessMicros: Option[Column] = None,
      maxAheadMicros: Option[Long] = None): ProjectedInput = {
    val keyColumns = plan.keyColumns.zipWithIndex.map { case (c, i) => c.as(keyColumnName(i)) }
    val original =
      if (keepRows) Seq(F.struct(plan.userColumns.map(column(plan, _)): _*).as(OriginalRow)) else Nil
    val columns = keyColumns ++ Seq(F.unix_micros(plan.eventTimeColumn).as(InputPlan.EventTimeMicros)) ++
      aggregateInputs.distinct.map(column(plan, _)) ++ policyColumns
    val anyKeyNull = plan.keyColumns.map(_.isNull).reduce(_ || _)
    // Invalid rows are not filtered (nor counted by an observe()) here, row by row: the partial
    // aggregation, which reads every row anyway, skips and counts them by this code (the first
    // reason that applies), so the scan stays one code-generated stage (see InvalidRows). Only
    // the checks the query's options call for: a branch that can never apply would still be
    // folded away by the optimizer in every micro-batch.
    val checks: Seq[(Column, Int)] = Seq(
      Some(anyKeyNull) -> InvalidRows.NullKey,
      Some(plan.eventTimeColumn.isNull) -> InvalidRows.NullEventTime,
      source.map(_.isNull) -> InvalidRows.NullSource,
      // Spark's session_window drops rows whose session would not end after they start: ours are invalid.
      rowSessionEnd.map(SessionGap.invalid(_, plan.eventTimeColumn)) -> InvalidRows.BadGap,
      latenessMicros.map(DurationColumn.invalid) -> InvalidRows.BadLateness,
      maxAheadMicros.map(InputPlan.tooFarAhead(plan.eventTimeColumn, _)) -> InvalidRows.FutureEventTime
    ).collect { case (Some(check), code) => check -> code }
    val reason = checks.tail.foldLeft(F.when(checks.head._1, checks.head._2)) { case (cases, (check, code)) =>
      cases.when(check, code)
    }.otherwise(InvalidRows.Valid)
    val projected = plan.events.select((columns :+ reason.as(InvalidReasonCode)) ++ original: _*)
    val keySchema = StructType(projected.schema.take(plan.keys.size))
    // Kept rows: the invalid ones too, with the reason, so nothing leaves the query unseen.
    val invalid = if (!keepRows) None
    else {
      val coded = plan.events.select((keyColumns :+ reason.as(InvalidReasonCode)) ++ original: _*)
      val code = coded.col(InvalidReasonCode)
      Some(coded.where(code =!= InvalidRows.Valid)
          .select(plan.keys.indices.map(i => coded.col(keyColumnName(i))) ++ Seq(
              InvalidRows.describe(code).as(InvalidReason), coded.col(OriginalRow)): _*))
    }
    ProjectedInput(projected, keySchema, invalid)
  }
}
