"""Trace files: Avro object container files of `TraceRecord` (``schemas/trace_record.avsc``).

The file's header carries the complete writer schema, with `InferenceRequest` inlined, so any Avro
reader (a simulator in another language, ``fastavro.reader``) reads a trace without our code.
The request schema lives once, in ``inference_request.avsc``; the trace schema names it and is
completed here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import parse_schema

from inferq.messaging.codec import load_schema
from inferq.tools.loadtest.errors import TraceFileError
from inferq.tools.traces.errors import TraceError
from inferq.tools.traces.files import avro_container, avro_records

TRACE_SCHEMA_NAME = "io.inferq.TraceRecord"
_REQUEST_TYPE = "io.inferq.InferenceRequest"


@cache
def trace_schema() -> dict[str, Any]:
    """The parsed TraceRecord schema with InferenceRequest inlined (parsed once)."""
    schema = load_schema("trace_record")
    request = load_schema("inference_request")
    for f in schema["fields"]:
        if f["type"] == _REQUEST_TYPE:
            f["type"] = request
    parsed = parse_schema(schema)
    if not isinstance(parsed, dict):
        raise TypeError("a record schema parses to a dict")
    return parsed


def write_trace(path: Path, records: Iterable[dict[str, Any]], metadata: dict[str, str]) -> int:
    """Write `records` (TraceRecord dicts) to `path`; returns how many were written."""
    count = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal count
        for record in records:
            count += 1
            yield record

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        # deflate: request texts compress several times over, and every Avro reader supports it.
        fastavro.writer(out, trace_schema(), counted(), codec="deflate", metadata=metadata)
    return count


def read_trace(path: Path) -> Iterator[dict[str, Any]]:
    """The TraceRecords of `path`, in file order. Raises `TraceFileError` for a file that is not a trace."""
    try:
        yield from avro_records(path, named=TRACE_SCHEMA_NAME)
    except TraceError as exc:
        raise TraceFileError(str(exc)) from exc


def trace_metadata(path: Path) -> dict[str, str]:
    """The inferq.* metadata the exporter wrote into the file header (source, range, counts)."""
    try:
        with avro_container(path) as reader:
            return {k: v for k, v in reader.metadata.items() if k.startswith("inferq.")}
    except TraceError as exc:
        raise TraceFileError(str(exc)) from exc
