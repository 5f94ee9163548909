package io.github.keyedwatermarks.catalyst

import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Cast}
import org.apache.spark.sql.catalyst.expressions.objects.AssertNotNull
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project}
import org.apache.spark.sql.classic
import org.apache.spark.sql.keyedwatermarks.SparkBridge
import org.apache.spark.sql.types.{CalendarIntervalType, DataType, StructType}

/**
 * Small helpers over Spark's internal APIs (analyzed plans, casts, encoders) that the planner,
 * the input checks and the emitter share. Not the only code touching internals: so do the
 * rest of catalyst/ (expressions, aggregate buffers, UnsafeRow bytes), the plan nodes of
 * partials/ and the shims/; see the layout in CONTRIBUTING.md.
 */
private[keyedwatermarks] object SparkInternals {

  /** The resolved logical plan of a classic (non-Connect) DataFrame. */
  def analyzedPlan(df: DataFrame): LogicalPlan = df match {
    case ds: classic.Dataset[_] => ds.queryExecution.analyzed
    case other => throw new IllegalArgumentException(
        s"keyed-watermarks needs a classic Spark session (not Spark Connect); got ${other.getClass.getName}")
  }

  def output(df: DataFrame): Seq[Attribute] = analyzedPlan(df).output

  /**
   * Whether Spark's `session_window` accepts a gap of this type: it casts the gap to a calendar
   * interval (strings and calendar intervals; not INTERVAL DAY TO SECOND, not numbers).
   */
  def castsToCalendarInterval(dataType: DataType): Boolean =
    dataType == CalendarIntervalType || Cast.canCast(dataType, CalendarIntervalType)

  /**
   * The columns of `schema` from `df`, by name and in `schema`'s order, with `schema`'s
   * nullability: a column `schema` declares non-null that `df` does not is wrapped in Spark's
   * AssertNotNull (as `Dataset.as[T]` does for non-null fields), which fails clearly on a null
   * rather than let the optimizer trust a false declaration. One Project: it also drops `df`'s
   * other columns (a `drop` before it would be a node more in every micro-batch's plan).
   */
  def withNullability(df: DataFrame, schema: StructType): DataFrame = {
    val plan = analyzedPlan(df)
    val columns = schema.fields.toSeq.map { f =>
      val named = plan.output.filter(_.name == f.name)
      require(named.size == 1, s"column ${f.name}: ${named.size} of ${plan.output.map(_.name)} have its name")
      val a = named.head
      if (a.nullable && !f.nullable) Alias(AssertNotNull(a), a.name)(explicitMetadata = Some(a.metadata)) else a
    }
    SparkBridge.ofRows(df.sparkSession, Project(columns, plan))
  }

  /** Row <-> InternalRow converters, created lazily on executors (they hold generated code). */
  final class RowConverter(schema: StructType) extends Serializable {
    @transient private lazy val encoder = ExpressionEncoder(schema).resolveAndBind()
    @transient private lazy val ser = encoder.createSerializer()
    @transient private lazy val de = encoder.createDeserializer()
    /** The returned row is reused by the next call: consume or copy it. */
    def toInternal(row: Row): InternalRow = ser(row)
    def toExternal(row: InternalRow): Row = de(row)
  }
}
