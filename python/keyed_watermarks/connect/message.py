"""The message ``keyed_watermarks.KeyedWatermarksRelation`` of
``jvm/src/main/protobuf/keyed_watermarks.proto`` (the contract with the server plugin).

Why no generated ``_pb2`` module: generated code pins a minimum protobuf runtime, while this
client must run with whatever protobuf the user's pyspark / pyspark-client brings. So the file
descriptor is declared here, field by field as in the .proto, added to protobuf's default pool
(where pyspark's own ``spark/connect/*.proto`` already are) and its message class built from it.
tests/test_connect_message.py compiles the .proto and checks that it equals this descriptor.
"""

from __future__ import annotations

from typing import Any

import pyspark.sql.connect.proto  # noqa: F401  (registers spark/connect/*.proto in the default pool)
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

FILE_NAME = "keyed_watermarks.proto"
TYPE_NAME = "keyed_watermarks.KeyedWatermarksRelation"

# Step values (enum KeyedWatermarksRelation.Step).
PLAN = 0
VALIDATE_WATERMARK = 1
VALIDATE_WINDOWS = 2
AS_OF_JOIN = 3
INTERVAL_JOIN = 4

_F = descriptor_pb2.FieldDescriptorProto


def file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto of keyed_watermarks.proto."""
    f = descriptor_pb2.FileDescriptorProto(
        name=FILE_NAME,
        package="keyed_watermarks",
        dependency=["spark/connect/expressions.proto", "spark/connect/relations.proto"],
        syntax="proto3",
    )
    m = f.message_type.add(name="KeyedWatermarksRelation")
    step = m.enum_type.add(name="Step")
    for name, number in (
        ("PLAN", PLAN),
        ("VALIDATE_WATERMARK", VALIDATE_WATERMARK),
        ("VALIDATE_WINDOWS", VALIDATE_WINDOWS),
        ("AS_OF_JOIN", AS_OF_JOIN),
        ("INTERVAL_JOIN", INTERVAL_JOIN),
    ):
        step.value.add(name=name, number=number)
    # map<string, spark.connect.Expression> is a repeated nested ColumnsEntry {key = 1; value = 2}.
    entry = m.nested_type.add(name="ColumnsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=_F.LABEL_OPTIONAL, type=_F.TYPE_STRING)
    entry.field.add(
        name="value", number=2, label=_F.LABEL_OPTIONAL, type=_F.TYPE_MESSAGE, type_name=".spark.connect.Expression"
    )
    m.field.add(name="input", number=1, label=_F.LABEL_OPTIONAL, type=_F.TYPE_MESSAGE, type_name=".spark.connect.Relation")
    m.field.add(name="options", number=2, label=_F.LABEL_OPTIONAL, type=_F.TYPE_STRING)
    m.field.add(
        name="columns",
        number=3,
        label=_F.LABEL_REPEATED,
        type=_F.TYPE_MESSAGE,
        type_name=".keyed_watermarks.KeyedWatermarksRelation.ColumnsEntry",
    )
    m.field.add(
        name="aggregates", number=4, label=_F.LABEL_REPEATED, type=_F.TYPE_MESSAGE, type_name=".spark.connect.Expression"
    )
    m.field.add(
        name="step",
        number=5,
        label=_F.LABEL_OPTIONAL,
        type=_F.TYPE_ENUM,
        type_name=".keyed_watermarks.KeyedWatermarksRelation.Step",
    )
    m.field.add(name="other", number=6, label=_F.LABEL_OPTIONAL, type=_F.TYPE_MESSAGE, type_name=".spark.connect.Relation")
    return f


def _message_class() -> Any:
    pool = descriptor_pool.Default()
    try:
        descriptor = pool.FindMessageTypeByName(TYPE_NAME)
    except KeyError:
        pool.AddSerializedFile(file_descriptor().SerializeToString())
        descriptor = pool.FindMessageTypeByName(TYPE_NAME)
    return message_factory.GetMessageClass(descriptor)


KeyedWatermarksRelation = _message_class()
