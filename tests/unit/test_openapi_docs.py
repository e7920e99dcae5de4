"""The OpenAPI documents in schemas/ say what the code does: valid OpenAPI 3.1, the same routes, the
same request fields with the same bounds, the answers' fields and every status code the code sends.
A change on either side without the other fails here."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import yaml
from openapi_spec_validator import validate
from starlette.routing import Route
from starlette.testclient import TestClient

from inferq.ingest import errors as ingest_errors
from inferq.ingest.app import create_app as create_ingest
from inferq.ingest.settings import IngestSettings
from inferq.ingest.validation import SubmitRequest
from inferq.messaging import limits
from inferq.messaging.records import InferenceResult
from inferq.results.app import create_app as create_results
from inferq.results.settings import ResultsSettings
from inferq.results.view import public_view
from tests.support.fakes import FakeBacklog, FakeResultFeed, RecordingProducer, result_record

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
# What a client relies on; titles, descriptions and defaults are prose.
_PROSE = {"title", "description", "default", "examples"}


def document(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SCHEMAS / f"{name}.openapi.yaml").read_text(encoding="utf-8"))
    return loaded


def inline(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with every local $ref replaced by what it names (no cycles in our schemas)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            return inline(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
        return {k: inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [inline(v, defs) for v in schema]
    return schema


def canonical(schema: dict[str, Any]) -> dict[str, Any]:
    """One spelling per meaning: `type: [X, "null"]`, a null enum member and an `anyOf` with a null
    member all become `nullable`; the other members are listed under `one_of` (in order)."""
    schema = {k: v for k, v in schema.items() if k not in _PROSE}
    nullable = False
    if "anyOf" in schema:
        members = schema.pop("anyOf")
        canon = [canonical(m) for m in members if m != {"type": "null"}]
        result = canon[0] | schema if len(canon) == 1 else {"one_of": canon} | schema
        result["nullable"] = result.get("nullable", False) or {"type": "null"} in members
        return result
    kind = schema.get("type")
    if isinstance(kind, list) and "null" in kind:
        rest = [t for t in kind if t != "null"]
        schema["type"] = rest[0] if len(rest) == 1 else rest
        nullable = True
    if "enum" in schema and None in schema["enum"]:
        schema["enum"] = [v for v in schema["enum"] if v is not None]
        nullable = True
    if "properties" in schema:
        schema["properties"] = {k: canonical(v) for k, v in schema["properties"].items()}
    if "items" in schema:
        schema["items"] = canonical(schema["items"])
    if "required" in schema:
        schema["required"] = sorted(schema["required"])
    schema["nullable"] = nullable
    return schema


def submit_schema_from_code() -> dict[str, Any]:
    raw = SubmitRequest.model_json_schema()
    return canonical(inline({k: v for k, v in raw.items() if k != "$defs"}, raw["$defs"]))


def submit_schema_from_doc() -> dict[str, Any]:
    doc = document("ingest")
    schemas = doc["components"]["schemas"]
    return canonical(inline(schemas["SubmitRequest"], schemas))


def ingest_app() -> Any:
    return create_ingest(
        IngestSettings(), producer=RecordingProducer(), check_topics=False, backlog=FakeBacklog()
    )


def routes_of(app: Any) -> set[tuple[str, str]]:
    found = set()
    for route in app.routes:
        assert isinstance(route, Route)
        found |= {(route.path, m.lower()) for m in route.methods or () if m != "HEAD"}
    return found


def routes_in(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, method) for path, item in doc["paths"].items() for method in item}


@pytest.mark.parametrize("name", ["ingest", "results"])
def test_the_documents_are_valid_openapi_3_1(name):
    doc = document(name)
    assert doc["openapi"].startswith("3.1")
    validate(doc)


def test_ingest_documents_its_routes_exactly():
    assert routes_in(document("ingest")) == routes_of(ingest_app())


def test_results_documents_its_routes_exactly(tmp_path):
    app = create_results(ResultsSettings(db_path=tmp_path / "r.db"), check_topics=False, feed=FakeResultFeed)
    assert routes_in(document("results")) == routes_of(app)


def test_the_request_body_has_the_fields_and_bounds_the_code_enforces():
    from_doc, from_code = submit_schema_from_doc(), submit_schema_from_code()
    assert sorted(from_doc["properties"]) == sorted(from_code["properties"])
    for name, field in from_code["properties"].items():
        assert from_doc["properties"][name] == field, name
    assert from_doc == from_code


def test_every_refusal_ingest_can_send_is_documented():
    statuses = {
        cls.status_code
        for _, cls in inspect.getmembers(ingest_errors, inspect.isclass)
        if issubclass(cls, ingest_errors.IngestError) and cls is not ingest_errors.IngestError
    }
    documented = {int(code) for code in document("ingest")["paths"]["/v1/requests"]["post"]["responses"]}
    assert statuses | {202} == documented


def test_the_202_body_is_what_the_document_says():
    app = create_ingest(
        IngestSettings(), producer=RecordingProducer(), check_topics=False, backlog=FakeBacklog()
    )
    with TestClient(app) as client:
        body = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}
        answer = client.post("/v1/requests", json=body).json()
    accepted = document("ingest")["components"]["schemas"]["Accepted"]
    assert sorted(answer) == sorted(accepted["properties"]) == sorted(accepted["required"])


def test_a_result_has_the_fields_the_document_says():
    result_schema = document("results")["components"]["schemas"]
    # Every optional field set: output, error, usage with its details, what the backend said.
    told = {
        "error": "e",
        "finish_reason": "length",
        "system_fingerprint": "fp_1",
        "embeddings": [[0.5, -0.25]],
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": 2,
            "total_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 1},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }
    told |= {"tool_calls": '[{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]'}
    every = {"index": 0, "content": None, "finish_reason": "stop", "tool_calls": told["tool_calls"]}
    every |= {"refusal": "no", "logprobs": '{"content": null, "refusal": []}'}
    told |= {"choices": [every, {"index": 1, "content": "b"}]}
    view = public_view(InferenceResult.from_record(result_record("a", status="FAILED") | told))
    properties = result_schema["Result"]["properties"]
    assert sorted(view) == sorted(properties)
    assert sorted(view["choices"][0]) == sorted(result_schema["Choice"]["properties"])
    assert set(result_schema["Choice"]["required"]) <= set(view["choices"][1])
    assert properties["choices"]["maxItems"] == limits.MAX_CHOICES
    assert result_schema["Choice"]["properties"]["refusal"]["maxLength"] == limits.MAX_REFUSAL_CHARS
    assert set(result_schema["Result"]["required"]) <= set(view)
    assert sorted(view["timings"]) == sorted(result_schema["Timings"]["properties"])
    assert sorted(view["usage"]) == sorted(result_schema["Usage"]["properties"])
    assert view["finish_reason"] in properties["finish_reason"]["enum"]
    assert sorted(properties["finish_reason"]["enum"]) == sorted(limits.FINISH_REASONS)
    assert result_schema["TokenDetails"]["maxProperties"] == limits.MAX_TOKEN_DETAILS
