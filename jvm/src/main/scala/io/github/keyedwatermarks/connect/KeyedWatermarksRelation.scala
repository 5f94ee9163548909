package io.github.keyedwatermarks.connect

import scala.collection.immutable.ListMap

import org.apache.spark.connect.proto
import org.sparkproject.connect.protobuf.{ByteString, CodedInputStream, WireFormat}

/**
 * The message `keyed_watermarks.KeyedWatermarksRelation` of `src/main/protobuf/keyed_watermarks.proto`.
 *
 * Why read the wire format by hand: the jar has no protoc-generated class (the server's
 * protobuf is shaded under `org.sparkproject.connect.protobuf`, and generating code for it
 * needs a relocated protoc build). The message is flat (six fields), and its embedded
 * `Relation` and `Expression`s are parsed by Spark's own generated classes.
 */
final case class KeyedWatermarksRelation(
    input: proto.Relation,
    options: String,
    columns: ListMap[String, proto.Expression],
    aggregates: Seq[proto.Expression],
    step: KeyedWatermarksRelation.Step,
    other: Option[proto.Relation])

object KeyedWatermarksRelation {
  /** The full name packed into `google.protobuf.Any.type_url` by the client. */
  val TypeName = "keyed_watermarks.KeyedWatermarksRelation"

  sealed trait Step
  case object Plan extends Step
  case object ValidateWatermark extends Step
  case object ValidateWindows extends Step
  case object AsOfJoin extends Step
  case object IntervalJoin extends Step

  // Field numbers of keyed_watermarks.proto.
  private val InputField = 1
  private val OptionsField = 2
  private val ColumnsField = 3
  private val AggregatesField = 4
  private val StepField = 5
  private val OtherField = 6
  // A map<string, Expression> entry is a message {key = 1; value = 2}.
  private val MapKeyField = 1
  private val MapValueField = 2

  def isTypeUrl(typeUrl: String): Boolean = typeUrl.endsWith("/" + TypeName)

  def parse(bytes: ByteString): KeyedWatermarksRelation = {
    val in = CodedInputStream.newInstance(bytes.asReadOnlyByteBuffer())
    var input: Option[proto.Relation] = None
    var options = ""
    var columns = ListMap.empty[String, proto.Expression]
    val aggregates = Seq.newBuilder[proto.Expression]
    var step: Step = Plan
    var other: Option[proto.Relation] = None
    var tag = in.readTag()
    while (tag != 0) {
      WireFormat.getTagFieldNumber(tag) match {
        case InputField => input = Some(proto.Relation.parseFrom(in.readBytes()))
        case OptionsField => options = in.readString()
        case ColumnsField => columns += mapEntry(in.readBytes())
        case AggregatesField => aggregates += proto.Expression.parseFrom(in.readBytes())
        case StepField => step = in.readEnum() match {
            case 0 => Plan
            case 1 => ValidateWatermark
            case 2 => ValidateWindows
            case 3 => AsOfJoin
            case 4 => IntervalJoin
            case unknown => throw new IllegalArgumentException(
                s"$TypeName: unknown step $unknown (a newer client than this server's keyed-watermarks jar?)")
          }
        case OtherField => other = Some(proto.Relation.parseFrom(in.readBytes()))
        case _ => in.skipField(tag) // proto3: fields a newer client adds are ignored
      }
      tag = in.readTag()
    }
    KeyedWatermarksRelation(
      input.getOrElse(throw new IllegalArgumentException(s"$TypeName: the input relation is missing")),
      options, columns, aggregates.result(), step, other)
  }

  private def mapEntry(bytes: ByteString): (String, proto.Expression) = {
    val in = CodedInputStream.newInstance(bytes.asReadOnlyByteBuffer())
    var key = ""
    var value = proto.Expression.getDefaultInstance
    var tag = in.readTag()
    while (tag != 0) {
      WireFormat.getTagFieldNumber(tag) match {
        case MapKeyField => key = in.readString()
        case MapValueField => value = proto.Expression.parseFrom(in.readBytes())
        case _ => in.skipField(tag)
      }
      tag = in.readTag()
    }
    key -> value
  }
}
