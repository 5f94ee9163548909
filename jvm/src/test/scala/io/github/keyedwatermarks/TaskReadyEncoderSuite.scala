package io.github.keyedwatermarks

import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, UnsafeRow}
import org.apache.spark.sql.catalyst.types.DataTypeUtils
import org.apache.spark.sql.types._

import io.github.keyedwatermarks.catalyst.TaskReadyEncoder

/**
 * catalyst.TaskReadyEncoder against Spark's own row encoder (`Encoders.row`), on the driver and
 * in real tasks (local[2], where its projections are lent): the same bytes for every row (so the
 * same state), the same rows back, and the analyzer run once for the encoder's own schema.
 */
class TaskReadyEncoderSuite extends SparkSuite {
  import TaskReadyEncoderSuite._
  override protected def runsQueries: Boolean = false

  private val schema = StructType(Seq(
      StructField("n", LongType, nullable = false),
      StructField("s", StringType),
      StructField("b", BinaryType),
      StructField("nested", StructType(Seq(StructField("x", IntegerType), StructField("y", DoubleType)))),
      StructField("list", ArrayType(IntegerType)),
      StructField("map", MapType(StringType, LongType))))

  private val rows = Seq(
    Row(1L, "a", Array[Byte](1, 2), Row(3, 4.5), Seq(1, 2, 3), Map("k" -> 7L)),
    Row(-9L, null, null, null, null, null),
    Row(Long.MaxValue, "é✓", Array.emptyByteArray, Row(null, Double.NaN), Seq.empty[Int], Map.empty[String, Long]),
    Row(0L, "x" * 100, Array.fill[Byte](70)(5), Row(-1, -0.0), Seq(4, 5), Map("a" -> 1L, "b" -> 2L)))

  // Spark's own: what Encoders.row(schema) gives a state variable.
  private def spark_(): ExpressionEncoder[Row] = ExpressionEncoder(schema)

  test("the same bytes and rows as Spark's own row encoder, on the driver") {
    assert(roundTrip(TaskReadyEncoder.row(schema), rows) == roundTrip(spark_(), rows))
    assert(TaskReadyEncoder.row(schema).schema == spark_().schema)
  }

  test("the same bytes and rows as Spark's own row encoder, in tasks (lent projections), task after task") {
    val data = rows
    val expected = roundTrip(spark_(), data)
    val enc = TaskReadyEncoder.row(schema)
    // Two jobs of two tasks, each task with two users of the encoder: every one sees its own rows.
    for (_ <- 1 to 2) {
      val out = spark.sparkContext.parallelize(0 until 2, 2).mapPartitions { _ =>
        val first = roundTrip(enc, data)
        val second = roundTrip(enc, data.reverse)
        Iterator.single((first, second))
      }.collect().toSeq
      out.foreach { case (first, second) =>
        assert(first == expected)
        assert(second == expected.reverse)
      }
    }
  }

  test("bound once for its own schema; other attributes get Spark's own binding") {
    val enc = TaskReadyEncoder.row(schema)
    assert(TaskReadyEncoder.row(schema) eq enc, "built once per JVM and schema")
    val bound = enc.resolveAndBind()
    assert(enc.resolveAndBind() eq bound)
    assert(enc.resolveAndBind(DataTypeUtils.toAttributes(schema)) eq bound)
    // Other names (or nullability): resolved by Spark, which binds by position: the same rows back.
    val renamed = schema.fields.toSeq.map(f => AttributeReference(f.name + "_other", f.dataType, f.nullable)())
    val other = enc.resolveAndBind(renamed)
    assert(other ne bound)
    val ser = spark_().createSerializer()
    rows.foreach(r => assert(show(other.createDeserializer()(ser(r))) == show(r)))
  }
}

object TaskReadyEncoderSuite {
  /**
   * Each row's UnsafeRow bytes, then the row decoded from them, by an encoder's serializer and
   * bound deserializer (here, not in the suite: tasks run it).
   */
  def roundTrip(enc: ExpressionEncoder[Row], in: Seq[Row]): Seq[(Seq[Byte], String)] = {
    val ser = enc.createSerializer()
    val de = enc.resolveAndBind().createDeserializer()
    in.map { r =>
      val bytes = ser(r).asInstanceOf[UnsafeRow].getBytes.clone()
      val row = new UnsafeRow(enc.schema.length)
      row.pointTo(bytes, bytes.length)
      (bytes.toSeq, show(de(row)))
    }
  }

  /** A value as text, byte arrays by content (Row equality compares them by identity). */
  def show(v: Any): String = v match {
    case null => "null"
    case b: Array[Byte] => b.mkString("bytes(", ",", ")")
    case r: Row => r.toSeq.map(show).mkString("Row(", ",", ")")
    case m: scala.collection.Map[_, _] =>
      m.toSeq.map { case (k, x) => show(k) + "->" + show(x) }.sorted.mkString("Map(", ",", ")")
    case s: scala.collection.Seq[_] => s.map(show).mkString("Seq(", ",", ")")
    case o => o.toString
  }
}
