"""The Python client's KeyedWatermarksRelation is exactly the message of
jvm/src/main/protobuf/keyed_watermarks.proto: protoc (grpcio-tools) compiles the .proto, with
pyspark's own spark/connect/*.proto descriptors as its imports, and the result must equal the
descriptor the client registers. (The server reads the same field numbers; the parity suite
sends every field through it: input, options, the key_lateness / gap / source columns, the
aggregates and all three steps.)"""

from __future__ import annotations

import pytest
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_tools import protoc  # grpcio-tools (dev/requirements.txt): protoc as a Python module

from keyed_watermarks.connect import message

# The fast layer: ./dev/test --quick runs the tests marked quick (pytest.ini).
pytestmark = pytest.mark.quick

PROTO_DIR = Path(__file__).resolve().parents[1] / "jvm" / "src" / "main" / "protobuf"


def _imports_descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """spark/connect/{expressions,relations}.proto and everything they import, from the
    descriptors pyspark registered (pyspark ships no .proto files)."""
    pool = descriptor_pool.Default()
    out = descriptor_pb2.FileDescriptorSet()
    seen = set()

    def add(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        fd = pool.FindFileByName(name)
        for dep in fd.dependencies:
            add(dep.name)
        fd.CopyToProto(out.file.add())

    for name in message.file_descriptor().dependency:
        add(name)
    return out


def test_client_message_is_the_proto_contract(tmp_path):
    imports = tmp_path / "imports.pb"
    imports.write_bytes(_imports_descriptor_set().SerializeToString())
    compiled = tmp_path / "compiled.pb"
    rc = protoc.main(
        [
            "protoc",
            f"--descriptor_set_in={imports}",
            f"--proto_path={PROTO_DIR}",
            f"--descriptor_set_out={compiled}",
            message.FILE_NAME,
        ]
    )
    assert rc == 0
    (from_proto,) = descriptor_pb2.FileDescriptorSet.FromString(compiled.read_bytes()).file
    for m in [*from_proto.message_type, *(n for t in from_proto.message_type for n in t.nested_type)]:
        for f in m.field:
            f.ClearField("json_name")  # protoc fills it in; the wire format never uses it
    assert message.file_descriptor() == from_proto

