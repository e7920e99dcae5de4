"""What ingest answers and writes, pinned byte for byte for representative requests of both APIs
(``POST /v1/requests`` and ``POST /v1/chat/completions``): the Avro record (topic, key, value) of
each acceptance, and the status and body of each refusal, including bodies that break several rules
at once (which refusal wins, and how the problems are listed).

The pins (`ingest_pinned.json` beside this file) were taken from ingest as it was before the request
lost its intermediate shapes (issue 24); regenerate them only for a change a user should see:
``INFERQ_REPIN=1 pytest tests/unit/test_ingest_pinned.py``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.tenancy.settings import TenancySettings
from tests.support.fakes import FakeBacklog, RecordingProducer
from tests.support.tenants import TenantSpec, write_tenants

PINS = Path(__file__).with_name("ingest_pinned.json")
NOW_MS = 1_767_225_600_000
WIDE = {"models": ["*"], "roles": ["user", "assistant", "system", "tool", "developer"]}
PARAMS = {
    name: True
    for name in (
        "temperature",
        "top_p",
        "max_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "response_format",
    )
}
ACME = TenantSpec("acme", keys=["iq_" + "a" * 43], entitlements=WIDE, params=PARAMS)
# Capped: LOW at most, and a max_tokens filled in when the caller sets none.
CAPPED = TenantSpec("capped", keys=["iq_" + "c" * 43], max_tier="LOW", params={"max_tokens": 64})
HI = [{"role": "user", "content": "hi"}]
FULL_PARAMS = {
    "temperature": 0.5,
    "top_p": 1,
    "max_tokens": 100,
    "stop": ["\n\n", "END"],
    "seed": -7,
    "presence_penalty": 0.25,
    "frequency_penalty": -1,
    "response_format": {"type": "json_object"},
}

# (case, endpoint, tenant, body, headers)
NATIVE = "/v1/requests"
CHAT = "/v1/chat/completions"
CASES: list[tuple[str, str, TenantSpec, Any, dict[str, str]]] = [
    ("native minimal", NATIVE, ACME, {"scenario": "realtime_chat", "messages": HI, "request_id": "n-1"}, {}),
    (
        "native full",
        NATIVE,
        ACME,
        {
            "scenario": "morning_brief",
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo ☃"}],
            "model": "inferq-fast",
            "tenant": "acme",
            "session_id": "s-9",
            "deadline_ms": 12_345,
            "priority": "MEDIUM",
            "request_id": "n-2",
            "estimated_tokens": 321,
            "params": FULL_PARAMS,
            "stream": True,
        },
        {},
    ),
    (
        "native absolute deadline, a single stop",
        NATIVE,
        ACME,
        {
            "scenario": "emotion_analysis",
            "messages": HI,
            "request_id": "n-3",
            "expire_at_ms": NOW_MS + 60_000,
            "params": {"stop": "x", "temperature": 2},
            "reply_to": "inferq.results",
        },
        {},
    ),
    (
        "native capped tenant",
        NATIVE,
        CAPPED,
        {"scenario": "realtime_chat", "messages": HI, "request_id": "n-4"},
        {},
    ),
    ("native no request_id", NATIVE, ACME, {"scenario": "realtime_chat", "messages": HI}, {}),
    ("chat minimal", CHAT, ACME, {"model": "inferq", "messages": HI}, {}),
    (
        "chat full",
        CHAT,
        ACME,
        {
            "model": "inferq-fast",
            "messages": [
                {"role": "system", "content": "be brief"},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "one "}, {"type": "text", "text": "two"}],
                },
                {"role": "assistant", "content": "ok", "name": "bot"},
            ],
            "temperature": 1,
            "top_p": 0.9,
            "max_completion_tokens": 50,
            "stop": "END",
            "seed": 42,
            "presence_penalty": 0.1,
            "frequency_penalty": 0.2,
            "response_format": {"type": "text"},
            "user": "end-user-7",
            "metadata": {"inferq_priority": "low", "other": "kept out"},
            "n": 1,
            "store": False,
        },
        {
            "X-Inferq-Scenario": "emotion_analysis",
            "X-Inferq-Deadline-Ms": "20000",
            "X-Stainless-Read-Timeout": "9.5",
        },
    ),
    (
        "chat stream",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI, "stream": True, "stream_options": {"include_usage": True}},
        {"X-Inferq-Priority": "HIGH"},
    ),
    ("chat capped tenant", CHAT, CAPPED, {"model": "inferq", "messages": HI, "max_tokens": 10}, {}),
    ("chat capped tenant, no max_tokens", CHAT, CAPPED, {"model": "inferq", "messages": HI}, {}),
    # Refusals, one rule broken.
    ("native bad role", NATIVE, ACME, {"scenario": "s", "messages": [{"role": "robot", "content": "x"}]}, {}),
    ("native temperature", NATIVE, ACME, {"scenario": "s", "messages": HI, "params": {"temperature": 9}}, {}),
    (
        "native unknown param",
        NATIVE,
        ACME,
        {"scenario": "s", "messages": HI, "params": {"functions": []}},
        {},
    ),
    (
        "native both deadlines",
        NATIVE,
        ACME,
        {"scenario": "s", "messages": HI, "deadline_ms": 5, "expire_at_ms": 5},
        {},
    ),
    ("native past deadline", NATIVE, ACME, {"scenario": "s", "messages": HI, "expire_at_ms": NOW_MS - 1}, {}),
    ("native bad reply_to", NATIVE, ACME, {"scenario": "s", "messages": HI, "reply_to": "other.topic"}, {}),
    ("native another tenant", NATIVE, ACME, {"scenario": "s", "messages": HI, "tenant": "beta"}, {}),
    ("native over entitlement", NATIVE, CAPPED, {"scenario": "s", "messages": HI, "model": "big"}, {}),
    (
        "native deadline over cap",
        NATIVE,
        CAPPED,
        {"scenario": "s", "messages": HI, "params": {"seed": 1}},
        {},
    ),
    ("native not an object", NATIVE, ACME, [1], {}),
    ("chat n=9", CHAT, ACME, {"model": "inferq", "messages": HI, "n": 9}, {}),
    ("chat temperature", CHAT, ACME, {"model": "inferq", "messages": HI, "temperature": 2.5}, {}),
    ("chat bad role", CHAT, ACME, {"model": "inferq", "messages": [{"role": "robot", "content": "x"}]}, {}),
    (
        "chat part too long",
        CHAT,
        ACME,
        {
            "model": "inferq",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "x" * 300_000}] * 2}],
        },
        {},
    ),
    (
        "chat surrogate",
        CHAT,
        ACME,
        b'{"model":"inferq","messages":[{"role":"user","content":"\\ud800"}]}',
        {},
    ),
    ("chat unknown model", CHAT, ACME, {"model": "gpt-4o", "messages": HI}, {}),
    ("chat tools", CHAT, ACME, {"model": "inferq", "messages": HI, "tools": []}, {}),
    (
        "chat bad header priority",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI},
        {"X-Inferq-Priority": "URGENT"},
    ),
    (
        "chat bad header scenario",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI},
        {"X-Inferq-Scenario": "a b"},
    ),
    ("chat deadline zero", CHAT, ACME, {"model": "inferq", "messages": HI}, {"X-Inferq-Deadline-Ms": "0"}),
    (
        "chat deadline text",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI, "metadata": {"inferq_deadline_ms": "x"}},
        {},
    ),
    (
        "chat two max tokens",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI, "max_tokens": 1, "max_completion_tokens": 2},
        {},
    ),
    (
        "chat max_completion_tokens",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI, "max_completion_tokens": 0},
        {},
    ),
    ("chat stream_options alone", CHAT, ACME, {"model": "inferq", "messages": HI, "stream_options": {}}, {}),
    ("chat over entitlement", CHAT, CAPPED, {"model": "inferq", "messages": HI, "seed": 3}, {}),
    (
        "chat response_format",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI, "response_format": {"type": "x"}},
        {},
    ),
    # Refusals, several rules broken at once: which wins, and the list of problems.
    (
        "native many",
        NATIVE,
        ACME,
        {
            "scenario": "a b",
            "messages": [{"role": "x", "content": 1}],
            "deadline_ms": 0,
            "priority": "NOW",
            "params": {"temperature": "hot", "stop": []},
            "stream": 1,
        },
        {},
    ),
    (
        "chat own shape and bounds",
        CHAT,
        ACME,
        {
            "model": "inferq",
            "messages": [{"role": "robot", "content": "x"}],
            "stream": "yes",
            "temperature": 9,
        },
        {},
    ),
    ("chat unknown model and bounds", CHAT, ACME, {"model": "gpt-4o", "messages": HI, "temperature": 9}, {}),
    (
        "chat headers and bounds",
        CHAT,
        ACME,
        {
            "model": "inferq",
            "messages": [{"role": "robot", "content": "x"}],
            "top_p": 2,
            "stop": ["a"] * 5,
            "stream": True,
            "stream_options": {},
        },
        {"X-Inferq-Scenario": "a b", "X-Inferq-Priority": "soon", "X-Inferq-Deadline-Ms": "0"},
    ),
    (
        "chat header dispute and bounds",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI, "metadata": {"inferq_priority": "LOW"}, "seed": 1.5},
        {"X-Inferq-Priority": "HIGH"},
    ),
    (
        "chat stream_options and bounds",
        CHAT,
        ACME,
        {"model": "inferq", "messages": HI, "stream_options": {}, "temperature": 9},
        {},
    ),
]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tenants = write_tenants(tmp_path_factory.mktemp("pins") / "tenants.toml", ACME, CAPPED)
    producer = RecordingProducer()
    app = create_app(
        IngestSettings(tenants=TenancySettings(file=tenants), chat_max_wait_s=0.01),
        producer=producer,
        clock_ms=lambda: NOW_MS,
        check_topics=False,
        backlog=FakeBacklog(),
    )
    seen: dict[str, Any] = {}
    # Ingest makes request ids up with uuid4: a fixed sequence, so the records are the same each run.
    ids = iter(range(1, 1_000))
    real_uuid4 = uuid.uuid4
    uuid.uuid4 = lambda: uuid.UUID(int=next(ids))  # type: ignore[assignment]
    try:
        with TestClient(app) as client:
            for case, path, tenant, body, headers in CASES:
                before = len(producer.sent)
                content = body if isinstance(body, bytes) else json.dumps(body).encode()
                response = client.post(
                    path,
                    content=content,
                    headers={"content-type": "application/json"} | tenant.headers() | headers,
                )
                answer = (
                    response.text
                    if response.headers["content-type"].startswith("text/event-stream")
                    else response.json()
                )
                seen[case] = {
                    "status": response.status_code,
                    "answer": answer,
                    "records": [
                        [topic, (key or b"").hex(), value.hex()]
                        for topic, value, key in producer.sent[before:]
                    ],
                }
    finally:
        uuid.uuid4 = real_uuid4
    yield seen


def test_each_request_gets_the_answer_and_the_record_it_got_before(observed: dict[str, Any]) -> None:
    if os.environ.get("INFERQ_REPIN"):
        PINS.write_text(json.dumps(observed, indent=1, ensure_ascii=False) + "\n")
    pinned = json.loads(PINS.read_text())
    assert sorted(observed) == sorted(pinned)
    for case in pinned:
        assert observed[case] == pinned[case], case


def test_the_pins_cover_acceptances_and_refusals_of_both_apis(observed: dict[str, Any]) -> None:
    accepted = {case for case, seen in observed.items() if seen["records"]}
    assert {
        "native full",
        "chat full",
        "chat stream",
        "native capped tenant",
        "chat capped tenant",
    } <= accepted
    assert all(len(observed[case]["records"]) == 1 for case in accepted)
    refused = {observed[case]["status"] for case in observed if case not in accepted}
    assert refused == {400, 403, 404, 422}
