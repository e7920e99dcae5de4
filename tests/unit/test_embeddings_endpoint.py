"""``POST /v1/embeddings`` with the official openai SDK, in-process (test_chat_completions' harness:
ingest on loopback, a fake reply topic the test answers on as the dispatcher would): what the record
carries, what the caller gets back (checked against the SDK's `CreateEmbeddingResponse`), floats
and base64, and the hostile bodies each refused with a 400 naming the parameter, nothing queued.
The same through the real broker, dispatcher and simulated backend: tests/e2e/test_openai_embeddings.py.
"""

from __future__ import annotations

import asyncio
import base64
import struct
from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types import CreateEmbeddingResponse

from inferq.ingest.chat.embeddings import embedding_response
from inferq.messaging import limits
from inferq.messaging.records import InferenceResult, Status, Usage
from inferq.messaging.tiers import Tier
from tests.unit.test_chat_completions import ACME, BETA, answered, ingest, run

# Values a 32-bit float holds exactly, so floats and base64 compare equal.
VECTORS = ((0.5, -0.25, 0.125), (1.0, 0.0, -1.0))


async def embedded(svc: Any, call: Any, vectors: tuple[tuple[float, ...], ...] = VECTORS) -> Any:
    """`call` answered OK with `vectors` (no text: an embedding's result)."""
    return await answered(svc, call, output=None, embeddings=vectors, usage=Usage(7, 0, 7))


@run
async def test_the_sdk_gets_the_vectors_of_its_texts_and_the_record_carries_them(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        response = await embedded(
            svc,
            client.embeddings.create(
                model="inferq",
                input=["a memory", "another"],
                dimensions=3,
                encoding_format="float",
                user="u1",
            ),
        )
        assert isinstance(response, CreateEmbeddingResponse)
        assert [d.embedding for d in response.data] == [list(v) for v in VECTORS]
        assert [d.index for d in response.data] == [0, 1]
        assert (response.usage.prompt_tokens, response.usage.total_tokens) == (7, 7)
        record = await svc.next_request(0)
        assert record.embedding_input == ("a memory", "another") and record.messages == ()
        assert record.embedding_dimensions == 3
        assert (record.scenario, record.tier, record.tenant) == ("chat_embedding", Tier.HIGH, "acme")
        assert record.model == "text-embedding-3-small"  # "inferq": the first embedding model
        assert record.session_id is not None and "u1" not in record.session_id
        assert record.params is None and not record.stream
        await client.close()


@run
async def test_the_sdks_default_base64_decodes_to_the_same_vectors(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        response = await embedded(svc, client.embeddings.create(model="inferq", input="one text"))
        assert [d.embedding for d in response.data] == [list(v) for v in VECTORS]
        await client.close()


@run
async def test_a_bulk_scenario_from_the_header_is_low(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        raw = await embedded(
            svc,
            client.embeddings.with_raw_response.create(
                model="text-embedding-3-small",
                input=["m1", "m2"],
                extra_headers={"X-Inferq-Scenario": "memory_embedding", "X-Inferq-Deadline-Ms": "60000"},
            ),
        )
        assert raw.headers["x-inferq-tier"] == "LOW"
        record = await svc.next_request(0)
        assert (record.scenario, record.tier) == ("memory_embedding", Tier.LOW)
        assert record.expire_at_ms - record.created_at_ms <= 60_000
        await client.close()


@run
async def test_an_outcome_that_is_not_ok_is_the_sdks_error(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        call = client.embeddings.create(model="inferq", input="x")
        with pytest.raises(openai.APIStatusError) as failed:
            await answered(svc, call, status=Status.EXPIRED, output=None)
        assert failed.value.status_code == 504
        await client.close()


def embedding_body(**fields: Any) -> dict[str, Any]:
    return {"model": "inferq", "input": "hi"} | fields


HOSTILE: list[tuple[dict[str, Any], str]] = [
    (embedding_body(input=["x"] * (limits.MAX_EMBEDDING_INPUTS + 1), dimensions=1), "input"),
    (embedding_body(input=["ok", "y" * (limits.MAX_EMBEDDING_INPUT_CHARS + 1)]), "input[1]"),
    (embedding_body(input=["ok", ""]), "input[1]"),
    (embedding_body(input=[]), "input"),
    (embedding_body(input=[1, 2, 3]), "input"),
    (embedding_body(input=[[1, 2], [3]]), "input"),
    (embedding_body(input=["a", 1]), "input"),
    (embedding_body(input=7), "input"),
    (embedding_body(input=None), "input"),
    (embedding_body(dimensions=0), "dimensions"),
    (embedding_body(dimensions=limits.MAX_EMBEDDING_DIMENSIONS + 1), "dimensions"),
    (embedding_body(dimensions=10**30), "dimensions"),
    (embedding_body(dimensions="8"), "dimensions"),
    (embedding_body(dimensions=8.0), "dimensions"),
    (embedding_body(dimensions=True), "dimensions"),
    # The vectors could not fit one result record: counted with the dimensions, or the default's.
    (embedding_body(input=["z"] * 200), "input"),
    (embedding_body(input=["z"] * 100, dimensions=2048), "input"),
    (embedding_body(encoding_format="int8"), "encoding_format"),
    (embedding_body(user=5), "user"),
    (embedding_body(model=""), "model"),
    (embedding_body(messages=[{"role": "user", "content": "hi"}]), "messages"),
    ({"input": "hi"}, "model"),
    ({"model": "inferq"}, "input"),
]


@pytest.mark.parametrize(("fields", "param"), HOSTILE)
def test_a_hostile_body_is_a_400_naming_the_parameter_and_nothing_is_queued(
    tmp_path: Path, fields: dict[str, Any], param: str
) -> None:
    async def scenario() -> None:
        async with ingest(tmp_path) as svc, svc.http() as http:
            answer = await http.post("/v1/embeddings", json=fields)
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"]["param"] == param
            assert svc.producer.sent == []

    asyncio.run(asyncio.wait_for(scenario(), 60))


@run
async def test_bad_headers_an_unknown_model_and_no_key_are_refused(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        async with svc.http() as http:
            answer = await http.post(
                "/v1/embeddings", json=embedding_body(), headers={"X-Inferq-Priority": "URGENT"}
            )
            assert (answer.status_code, answer.json()["error"]["param"]) == (400, "x-inferq-priority")
            answer = await http.post("/v1/embeddings", json=embedding_body(model="text-embedding-9"))
            assert answer.status_code == 404
        async with svc.http(None) as anonymous:
            assert (await anonymous.post("/v1/embeddings", json=embedding_body())).status_code == 401
        assert svc.producer.sent == []


@run
async def test_another_tenants_result_for_the_same_id_does_not_answer(tmp_path: Path) -> None:
    async with ingest(tmp_path, chat_max_wait_s=1.0) as svc:
        client = svc.sdk(ACME, timeout=10)
        call = asyncio.ensure_future(client.embeddings.create(model="inferq", input="mine"))
        record = await svc.next_request(0)
        svc.answer(record, output=None, embeddings=VECTORS, tenant=BETA.name)
        with pytest.raises(openai.APIStatusError) as waited:
            await call
        assert waited.value.status_code == 504  # wait_exceeded: BETA's vectors were not ACME's
        await client.close()


def a_result(**fields: Any) -> InferenceResult:
    base: dict[str, Any] = {
        "request_id": "embd-1",
        "tier": Tier.LOW,
        "status": Status.OK,
        "model": "text-embedding-3-small",
        "enqueued_at_ms": 1_000,
        "completed_at_ms": 2_000,
        "attempts": 1,
        "dispatcher_id": "d",
        "usage": Usage(4, 0, 4),
        "embeddings": VECTORS,
    }
    return InferenceResult(**(base | fields))


def test_the_body_validates_as_the_sdks_create_embedding_response_in_both_encodings() -> None:
    floats = CreateEmbeddingResponse.model_validate(embedding_response(a_result(), base64_vectors=False))
    assert [d.embedding for d in floats.data] == [list(v) for v in VECTORS]
    encoded = embedding_response(a_result(), base64_vectors=True)
    first = base64.b64decode(encoded["data"][0]["embedding"])
    assert struct.unpack("<3f", first) == VECTORS[0]
