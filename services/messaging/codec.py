"""Avro single-object encoding of the envelope, with schemas parsed once.

Every record on our topics is ``C3 01`` + the 8-byte little-endian CRC-64-AVRO fingerprint of the
writer schema's canonical form + the Avro binary body (Avro spec, "Single object encoding"). So any
reader holding the `.avsc` files can decode a record without our code, and a reader can decode
records written by an older or newer schema version it has been given (Avro schema resolution).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, Generic, TypeVar

import fastavro
from fastavro.schema import fingerprint, parse_schema, to_parsing_canonical_form

from inferq.messaging.errors import DecodeError, UnknownSchemaError
from inferq.messaging.records import InferenceChunk, InferenceRequest, InferenceResult

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8
# The checkout's schemas/ folder, which the wheel ships as the package `inferq.schemas`.
SCHEMA_DIR: Traversable = files("inferq.schemas")

Record = dict[str, Any]
T = TypeVar("T")


def schema_fingerprint(schema: dict[str, Any]) -> bytes:
    """CRC-64-AVRO of the parsing canonical form, as the 8 little-endian bytes the header carries."""
    canonical = to_parsing_canonical_form(schema)
    value = int(fingerprint(canonical, "CRC-64-AVRO"), 16)
    return struct.pack("<Q", value)


@dataclass
class AvroCodec:
    """Encodes with one reader/writer schema; decodes any writer schema it was given.

    `known_writers` maps fingerprint → parsed writer schema. A record whose header names a schema
    not in that map raises `UnknownSchemaError` rather than guessing.
    """

    schema: dict[str, Any]
    known_writers: dict[bytes, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.schema = _parse(self.schema)
        self.header = MAGIC + schema_fingerprint(self.schema)
        self.known_writers.setdefault(self.header[2:], self.schema)

    def add_writer(self, schema: dict[str, Any]) -> None:
        """Accept records written with another version of the schema (older or newer)."""
        parsed = _parse(schema)
        self.known_writers[schema_fingerprint(parsed)] = parsed

    def encode(self, record: Record) -> bytes:
        buf = io.BytesIO()
        buf.write(self.header)
        fastavro.schemaless_writer(buf, self.schema, record)
        return buf.getvalue()

    def decode(self, data: bytes) -> Record:
        if len(data) < HEADER_SIZE or data[:2] != MAGIC:
            raise DecodeError("missing Avro single-object marker C3 01", raw_size=len(data))
        writer = self.known_writers.get(data[2:HEADER_SIZE])
        if writer is None:
            raise UnknownSchemaError(data[2:HEADER_SIZE], raw_size=len(data))
        buf = io.BytesIO(data)
        buf.seek(HEADER_SIZE)
        try:
            record = fastavro.schemaless_reader(buf, writer, self.schema)
        except (
            EOFError,
            ValueError,
            KeyError,
            IndexError,
            TypeError,
            UnicodeDecodeError,
            fastavro.read.SchemaResolutionError,
        ) as exc:
            raise DecodeError(f"corrupt body: {exc!r}", raw_size=len(data)) from exc
        if buf.tell() != len(data):
            raise DecodeError(f"{len(data) - buf.tell()} trailing bytes after the record", raw_size=len(data))
        if not isinstance(record, dict):
            raise DecodeError("body is not a record", raw_size=len(data))
        return record


def _parse(schema: dict[str, Any]) -> dict[str, Any]:
    parsed = parse_schema(schema)
    if not isinstance(parsed, dict):
        raise TypeError("a record schema parses to a dict")
    return parsed


def load_schema(name: str) -> dict[str, Any]:
    """Read `schemas/<name>.avsc` as JSON (unparsed)."""
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / f"{name}.avsc").read_text(encoding="utf-8"))
    return loaded


def earlier_schemas(name: str) -> list[dict[str, Any]]:
    """The earlier versions of `schemas/<name>.avsc` kept in `schemas/history/<name>.v<N>.avsc`:
    records written by a process not yet upgraded still decode (a rolling upgrade)."""
    prefix = f"{name}.v"
    found = [p for p in (SCHEMA_DIR / "history").iterdir() if p.name.startswith(prefix)]
    paths = sorted((p for p in found if p.name.endswith(".avsc")), key=lambda p: p.name)
    return [json.loads(p.read_text(encoding="utf-8")) for p in paths]


class TypedCodec(Generic[T]):
    """Encodes and decodes one typed record (`InferenceRequest`, `InferenceResult`); `avro` is the
    dict-level codec underneath, for tools that copy records field by field."""

    def __init__(self, avro: AvroCodec, to_record: Callable[[T], Record], from_record: Callable[[Record], T]):
        self.avro = avro
        self._to_record = to_record
        self._from_record = from_record

    def encode(self, value: T) -> bytes:
        return self.avro.encode(self._to_record(value))

    def decode(self, data: bytes) -> T:
        record = self.avro.decode(data)
        try:
            return self._from_record(record)
        except (KeyError, TypeError, ValueError) as exc:
            raise DecodeError(f"not a valid record: {exc!r}", raw_size=len(data)) from exc


@cache
def request_codec() -> TypedCodec[InferenceRequest]:
    """The process-wide codec of `InferenceRequest`, parsed once on first use."""
    avro = AvroCodec(load_schema("inference_request"))
    for earlier in earlier_schemas("inference_request"):
        avro.add_writer(earlier)
    return TypedCodec(avro, InferenceRequest.to_record, InferenceRequest.from_record)


@cache
def result_codec() -> TypedCodec[InferenceResult]:
    """The process-wide codec of `InferenceResult`, parsed once on first use."""
    avro = AvroCodec(load_schema("inference_result"))
    for earlier in earlier_schemas("inference_result"):
        avro.add_writer(earlier)
    return TypedCodec(avro, InferenceResult.to_record, InferenceResult.from_record)


@cache
def chunk_codec() -> TypedCodec[InferenceChunk]:
    """The process-wide codec of `InferenceChunk` (a streamed answer's pieces on a chunk topic)."""
    avro = AvroCodec(load_schema("inference_chunk"))
    for earlier in earlier_schemas("inference_chunk"):
        avro.add_writer(earlier)
    return TypedCodec(avro, InferenceChunk.to_record, InferenceChunk.from_record)
