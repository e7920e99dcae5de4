"""Generated bodies against the ingest app in-process, with a recording producer that refuses on
purpose now and then (the only 503 allowed).

- Bodies drawn from the OpenAPI document's `SubmitRequest` schema: the document and the code must
  agree, so such a body is accepted unless a rule the schema cannot say refuses it (a deadline in
  the past or too far, a reply topic of another pipeline).
- The same bodies mutated as JSON (a field set to any JSON value, a key dropped or added, nesting,
  another top-level type) and as bytes (truncated, a byte changed, garbage inserted): every answer
  is 202, 400, 413, 422 or 503, never another 5xx.

Every 202's record decodes, round-trips through the codec and keeps the bounds of
`inferq.messaging.limits` (`record_rules`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.messaging.topics import TopicNames
from tests.hostile.conftest import HostileFigures
from tests.hostile.record_rules import broken_rules
from tests.hostile.schema_strategy import from_schema
from tests.support.fakes import FakeBacklog, SwitchableProducer

TOPICS = TopicNames("inferq")
ALLOWED = {202, 400, 413, 422, 429, 503}
# Refusals a schema-valid body may still get: rules the schema cannot state.
# callback_url: the tenant's hosts, its secret and what the host resolves to (services/webhooks).
CONTEXT_FIELDS = {"expire_at_ms", "reply_to", "callback_url"}
# Function calling: rules across a message's fields (content null only with tool_calls, tool_call_id
# exactly on tool messages), tool_choice only with tools, and the shapes inside tools, tool_calls
# and response_format (`inferq.messaging.tool_rules`), which the document describes only as objects;
# the same for the objects `inferq.messaging.param_rules` checks (token-id keys, known fields, no
# inferq_* metadata key) and max_tokens against max_completion_tokens (`params` itself).
SHAPE_RULE_FIELD = re.compile(
    r"messages\.\d+(\.(content|tool_calls|tool_call_id))?|params(\.(tools|tool_choice|response_format"
    r"|logit_bias|metadata|prediction|web_search_options|moderation|prompt_cache_options))?"
)
DOC = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "schemas" / "ingest.openapi.yaml").read_text(encoding="utf-8")
)
SCHEMAS = DOC["components"]["schemas"]
FIELDS = sorted(SCHEMAS["SubmitRequest"]["properties"])
INTEGER_FIELDS = ["estimated_tokens", "deadline_ms", "expire_at_ms"]
EDGE_INTEGERS = [2**31, 2**31 - 1, 2**63, 2**63 - 1, -(2**63) - 1, 0, -1, 10**40, True, 1.0, "5"]
PARAM_NAMES = ["temperature", "stream", "model", "n", "messages", "stop", "seed", "top_p", "max_tokens", "x"]
FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


class Ingest:
    """One ingest app in-process and what it wrote."""

    def __init__(self, client: TestClient, producer: SwitchableProducer) -> None:
        self.client = client
        self.producer = producer

    def post(self, raw: bytes, *, refuse: bool, figures: HostileFigures, area: str) -> int:
        """POST `raw`; checks the answer and, for a new 202, the record. Returns the status."""
        self.producer.refusing = refuse
        sent_before = len(self.producer.sent)
        response = self.client.post("/v1/requests", content=raw, headers={"content-type": "application/json"})
        figures.tried(area)
        status = response.status_code
        if status >= 500 and not (status == 503 and refuse):
            figures.server_errors += 1
        assert status in ALLOWED, (status, response.text[:300], raw[:300])
        assert status != 503 or refuse, response.text
        answer = response.json()
        if status == 202:
            new = self.producer.sent[sent_before:]
            assert len(new) == (0 if answer["duplicate"] else 1)
            for _, value, key in new:
                assert broken_rules(value, key, TOPICS) == []
        else:
            assert isinstance(answer.get("error"), str) and answer["error"], answer
            assert len(self.producer.sent) == sent_before
        return status


@pytest.fixture(scope="module")
def ingest() -> Iterator[Ingest]:
    producer = SwitchableProducer()
    app = create_app(IngestSettings(), producer=producer, check_topics=False, backlog=FakeBacklog())
    with TestClient(app) as client:
        yield Ingest(client, producer)


# --- mutations ------------------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**31, 2**31 - 1, 2**63, 2**63 - 1, -(2**63) - 1, 0, -1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, body: dict[str, Any]) -> Any:
    """`body` with one to three JSON mutations."""
    value: Any = dict(body)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "edge", "set_param", "drop", "add", "nest", "retype", "message"]))
        if not isinstance(value, dict):
            break
        if op == "set":
            value[draw(st.sampled_from(FIELDS))] = draw(json_values)
        elif op == "set_param":
            name = draw(
                st.sampled_from(["temperature", "stream", "model", "n", "stop", "seed", "top_p", "x"])
            )
            value["params"] = {name: draw(json_values)}
        elif op == "drop" and value:
            del value[draw(st.sampled_from(sorted(value)))]
        elif op == "add":
            value[draw(st.text(min_size=1, max_size=20))] = draw(json_values)
        elif op == "nest":
            depth = draw(st.integers(1, 60))
            value[draw(st.sampled_from(FIELDS))] = json.loads("[" * depth + "1" + "]" * depth)
        elif op == "retype":
            value = draw(json_values)
        elif op == "message":
            value["messages"] = [draw(json_values)]
    return value


@st.composite
def bytes_mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    """`raw` truncated, with a byte changed, garbage inserted, or a prefix."""
    op = draw(st.sampled_from(["truncate", "flip", "insert", "prefix"]))
    at = draw(st.integers(0, max(0, len(raw) - 1)))
    if op == "truncate":
        return raw[:at]
    if op == "flip" and raw:
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    if op == "insert":
        return raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    return draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\x00", b" "])) + raw


def encode(value: Any, ascii_only: bool) -> bytes:
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


# --- the properties ---------------------------------------------------------------------------------


@FUZZ
@given(body=from_schema(SCHEMAS["SubmitRequest"], SCHEMAS), ascii_only=st.booleans(), refuse=st.booleans())
def test_a_body_the_document_allows_is_accepted_unless_a_context_rule_refuses_it(
    ingest: Ingest, hostile_figures: HostileFigures, body: dict[str, Any], ascii_only: bool, refuse: bool
) -> None:
    raw = encode(body, ascii_only)
    status = ingest.post(raw, refuse=refuse, figures=hostile_figures, area="http fuzz: schema bodies")
    if status == 422:
        problems = ingest.client.post("/v1/requests", content=raw).json()["problems"]
        fields = {p["field"] for p in problems}
        assert {f for f in fields if not SHAPE_RULE_FIELD.fullmatch(f)} <= CONTEXT_FIELDS, problems
    else:
        assert status in {202, 503}, status


@FUZZ
@given(data=st.data(), ascii_only=st.booleans(), refuse=st.booleans())
def test_a_mutated_body_is_answered_4xx_or_accepted_within_bounds(
    ingest: Ingest, hostile_figures: HostileFigures, data: st.DataObject, ascii_only: bool, refuse: bool
) -> None:
    body = data.draw(from_schema(SCHEMAS["SubmitRequest"], SCHEMAS))
    raw = encode(data.draw(mutated(body)), ascii_only)
    ingest.post(raw, refuse=refuse, figures=hostile_figures, area="http fuzz: JSON mutations")


@FUZZ
@given(data=st.data(), refuse=st.booleans())
def test_a_body_with_broken_bytes_is_answered_4xx_or_accepted_within_bounds(
    ingest: Ingest, hostile_figures: HostileFigures, data: st.DataObject, refuse: bool
) -> None:
    body = data.draw(from_schema(SCHEMAS["SubmitRequest"], SCHEMAS))
    raw = data.draw(bytes_mutated(encode(body, data.draw(st.booleans()))))
    ingest.post(raw, refuse=refuse, figures=hostile_figures, area="http fuzz: byte mutations")
