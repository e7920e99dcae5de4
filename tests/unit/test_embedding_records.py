"""An embedding request past ingest: its records (request v4, result v6, the earlier versions still
read), the dispatcher's rules for one written straight to Kafka, its cost, the tenant's
entitlements, the backend's vectors checked before they enter a result, the results table and view,
and the simulated backend's ``POST /v1/embeddings``."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from inferq.dispatcher.backend import ChatBackend, Completion
from inferq.dispatcher.errors import BackendError, RefusedRequestError
from inferq.dispatcher.outcomes import OutcomeBuilder
from inferq.dispatcher.starting import request_cost
from inferq.messaging import embedding_rules, limits
from inferq.messaging.codec import AvroCodec, earlier_schemas, request_codec, result_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.records import ChatMessage, InferenceRequest, InferenceResult, Status, Usage
from inferq.messaging.tiers import Tier
from inferq.results.table import ResultsTable
from inferq.results.view import public_view
from inferq.tenancy.entitlements import apply_entitlements
from inferq.tenancy.model import Entitlements, NameSet
from inferq.tools.simbackend import SimBackendSettings, create_app
from inferq.tools.simbackend.embeddings import vector
from tests.support.work import a_work
from tests.unit.test_dispatcher_backend_errors import API_KEY
from tests.unit.test_record_rules import HIGH, NOW, RULES

TEXTS = ("likes green tea", "sister is called Ana")
VECTORS = ((0.5, -0.25), (1.0, 0.0))


def an_embedding(**overrides: Any) -> InferenceRequest:
    request = InferenceRequest(
        request_id="embd-1",
        scenario="memory_embedding",
        tier=Tier.LOW,
        created_at_ms=NOW - 100,
        expire_at_ms=NOW + 60_000,
        messages=(),
        model="text-embedding-3-small",
        embedding_input=TEXTS,
        embedding_dimensions=2,
    )
    return replace(request, **overrides)


def a_result(**overrides: Any) -> InferenceResult:
    result = InferenceResult(
        "embd-1",
        Tier.LOW,
        Status.OK,
        "text-embedding-3-small",
        enqueued_at_ms=1,
        completed_at_ms=2,
        attempts=1,
        dispatcher_id="d",
        usage=Usage(9, 0, 9),
        tenant="acme",
        embeddings=VECTORS,
    )
    return replace(result, **overrides)


# --- records ----------------------------------------------------------------------------------------


def test_an_embedding_request_and_its_result_round_trip() -> None:
    request = an_embedding()
    assert request_codec().decode(request_codec().encode(request)) == request
    result = a_result()
    assert result_codec().decode(result_codec().encode(result)) == result
    chat = InferenceRequest.from_record(request.to_record() | {"embedding_input": None})
    assert not chat.is_embedding and request.is_embedding


def test_records_written_before_embeddings_read_with_none_and_new_ones_read_by_old_readers() -> None:
    *_older, request_v3 = earlier_schemas("inference_request")
    *_older, result_v5 = earlier_schemas("inference_result")
    chat = replace(an_embedding(), messages=(ChatMessage("user", "hi"),), embedding_input=None)
    old = chat.to_record()
    del old["embedding_input"], old["embedding_dimensions"]
    decoded = request_codec().decode(AvroCodec(request_v3).encode(old))
    assert (decoded.embedding_input, decoded.embedding_dimensions) == (None, None)
    old_result = a_result(embeddings=None).to_record()
    del old_result["embeddings"]
    assert result_codec().decode(AvroCodec(result_v5).encode(old_result)).embeddings is None
    # A reader not yet upgraded skips the new fields (Avro resolution).
    old_reader = AvroCodec(result_v5)
    old_reader.add_writer(result_codec().avro.schema)
    assert old_reader.decode(result_codec().encode(a_result()))["request_id"] == "embd-1"


def test_vectors_are_kept_as_32_bit_floats() -> None:
    third = a_result(embeddings=((1 / 3, 0.1),))
    back = result_codec().decode(result_codec().encode(third))
    assert back.embeddings is not None
    assert back.embeddings[0] == pytest.approx((1 / 3, 0.1), rel=1e-7)


# --- bounds -----------------------------------------------------------------------------------------


def test_the_result_bound_is_what_a_reply_record_can_carry() -> None:
    """The biggest result the bound lets through, encoded, stays under the 1 MB record limit."""
    dims = 1_024
    most = limits.MAX_EMBEDDING_RESULT_BYTES // (dims * embedding_rules.FLOAT_BYTES)
    assert embedding_rules.result_size_problem(most, dims) is None
    assert embedding_rules.result_size_problem(most + 1, dims) is not None
    biggest = a_result(embeddings=tuple((0.5,) * dims for _ in range(most)))
    assert len(result_codec().encode(biggest)) < 1_000_000 - 100_000
    # No dimensions asked: counted with the default's (1,536).
    assert embedding_rules.result_size_problem(97, None) is None
    assert "default dimensions" in (embedding_rules.result_size_problem(98, None) or "")


@pytest.mark.parametrize(
    ("vectors", "dimensions", "problem"),
    [
        ([[0.1, 0.2]], None, "one per input"),
        ("not vectors", None, "one per input"),
        ([[0.1, 0.2], [0.1]], None, "different lengths"),
        ([[0.1, 0.2], []], None, "not a list of numbers"),
        ([[0.1, 0.2], "xy"], None, "not a list of numbers"),
        ([[0.1, float("nan")], [0.1, 0.2]], None, "not a finite number"),
        ([[0.1, float("inf")], [0.1, 0.2]], None, "not a finite number"),
        ([[0.1, True], [0.1, 0.2]], None, "not a finite number"),
        ([[0.1, "0.2"], [0.1, 0.2]], None, "not a finite number"),
        ([[0.1, 1e39], [0.1, 0.2]], None, "32-bit float"),
        ([[0.1, 0.2], [0.1, 0.2]], 3, "not the dimensions asked for"),
        ([[0.1] * (limits.MAX_EMBEDDING_DIMENSIONS + 1)] * 2, None, "more than"),
        ([[0.1] * 4_000] * 2, None, None),
    ],
)
def test_the_backends_vectors_are_checked(vectors: Any, dimensions: int | None, problem: str | None) -> None:
    found = embedding_rules.vectors_problem(vectors, inputs=2, dimensions=dimensions)
    assert (found is None) if problem is None else (problem in (found or ""))


# --- the dispatcher ---------------------------------------------------------------------------------


def test_an_embedding_record_within_the_bounds_passes_the_record_rules() -> None:
    checked = RULES.check(an_embedding(), source_topic=HIGH, now_ms=NOW)
    assert checked.request.embedding_input == TEXTS and checked.params == {}


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (
            {"embedding_input": ("x",) * (limits.MAX_EMBEDDING_INPUTS + 1), "embedding_dimensions": 1},
            "at most",
        ),
        ({"embedding_input": ("y" * (limits.MAX_EMBEDDING_INPUT_CHARS + 1),)}, "input[0] is over"),
        ({"embedding_input": ("ok", "")}, "input[1] is empty"),
        ({"embedding_dimensions": 0}, "dimensions must be"),
        ({"embedding_dimensions": limits.MAX_EMBEDDING_DIMENSIONS + 1}, "dimensions must be"),
        ({"embedding_input": ("z",) * 200, "embedding_dimensions": None}, "bytes a result carries"),
        ({"messages": (ChatMessage("user", "hi"),)}, "no messages, params or stream"),
        ({"params": {"temperature": "0.2"}}, "no messages, params or stream"),
        ({"stream": True}, "no messages, params or stream"),
        ({"embedding_input": None, "messages": (ChatMessage("user", "hi"),)}, "only allowed with"),
    ],
)
def test_an_embedding_record_out_of_bounds_is_refused(overrides: dict[str, Any], problem: str) -> None:
    with pytest.raises(RefusedRequestError) as caught:
        RULES.check(an_embedding(**overrides), source_topic=HIGH, now_ms=NOW)
    assert problem in caught.value.reason


def test_an_embedding_record_with_no_texts_is_poison() -> None:
    with pytest.raises(DecodeError):
        RULES.check(an_embedding(embedding_input=()), source_topic=HIGH, now_ms=NOW)


def test_an_embedding_costs_its_texts_tokens_and_no_completion() -> None:
    work = a_work(Tier.LOW, embedding_input=("a" * 40, "b" * 5), messages=())
    assert request_cost(work) == 10 + 2
    assert request_cost(a_work(Tier.LOW, embedding_input=("a",), messages=(), estimated_tokens=77)) == 77


def test_the_tenants_scenarios_apply_and_no_max_tokens_is_added_to_an_embedding() -> None:
    chat_only = Entitlements(
        max_tier=Tier.HIGH, scenarios=NameSet.of(["realtime_chat"]), models=NameSet.of(["*"])
    )
    refused = apply_entitlements(an_embedding(), chat_only, default_reply_topic="r")
    assert [p.field for p in refused.problems] == ["scenario"]
    capped = replace(chat_only, scenarios=NameSet.of(["*"]), params={"max_tokens": 100})
    verdict = apply_entitlements(an_embedding(), capped, default_reply_topic="r")
    assert verdict.allowed and verdict.request.params is None


def embedded(answer: Any, dimensions: int | None = 2) -> tuple[Completion | BackendError, dict[str, Any]]:
    """What `ChatBackend.embed` makes of a backend answering `answer` to TEXTS, and what it sent."""
    sent: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        sent.update(await request.json())
        return web.json_response(answer)

    async def scenario() -> Completion | BackendError:
        app = web.Application()
        app.router.add_post("/v1/embeddings", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        backend = ChatBackend(f"http://127.0.0.1:{port}/v1", api_key=API_KEY, max_connections=2)
        try:
            return await backend.embed("emb", list(TEXTS), dimensions, timeout_s=5)
        except BackendError as exc:
            return exc
        finally:
            await backend.close()
            await runner.cleanup()

    return asyncio.run(scenario()), sent


def data(*vectors: Any, order: tuple[int, ...] = (0, 1)) -> dict[str, Any]:
    items = [{"object": "embedding", "index": i, "embedding": vectors[i]} for i in order]
    return {"object": "list", "data": items, "model": "emb", "usage": {"prompt_tokens": 9, "total_tokens": 9}}


def test_the_backends_vectors_come_back_in_input_order_into_the_result() -> None:
    completion, sent = embedded(data([1.0, 0.0], [0.5, 0.5], order=(1, 0)))
    assert sent == {"model": "emb", "input": list(TEXTS), "encoding_format": "float", "dimensions": 2}
    assert isinstance(completion, Completion)
    assert completion.embeddings == ((1.0, 0.0), (0.5, 0.5))
    assert (completion.prompt_tokens, completion.total_tokens) == (9, 9)
    result = OutcomeBuilder("d").ok(an_embedding(), completion, dispatched_at_ms=1, now_ms=2)
    assert result_codec().decode(result_codec().encode(result)).embeddings == ((1.0, 0.0), (0.5, 0.5))


@pytest.mark.parametrize(
    "answer",
    [
        data([1.0, float("nan")], [0.5, 0.5]),
        data([1.0, 0.0, 0.1], [0.5, 0.5, 0.1]),
        data([1.0, 0.0], [0.5]),
        {"data": [{"index": 0, "embedding": [1.0, 0.0]}]},
        {"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 0, "embedding": [1.0, 0.0]}]},
        {"data": [{"index": 0, "embedding": [1.0, 0.0]}, {"index": 7, "embedding": [1.0, 0.0]}]},
        {"data": "AAAA"},
        {"error": "nope"},
    ],
    ids=[
        "nan",
        "wrong dimensions",
        "ragged",
        "too few",
        "index twice",
        "index out of range",
        "base64",
        "no data",
    ],
)
def test_vectors_the_backend_got_wrong_fail_the_call_without_quoting_them(
    answer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        failure, _ = embedded(answer)
    assert isinstance(failure, BackendError)
    assert "0.5" not in str(failure) and "nan" not in str(failure).lower()


# --- results ----------------------------------------------------------------------------------------


def test_the_results_table_and_view_carry_the_vectors(tmp_path: Path) -> None:
    table = ResultsTable(tmp_path / "results.db")
    try:
        table.put_many([a_result(), a_result(request_id="chat-1", embeddings=None, output="hi")])
        stored = table.get("acme", "embd-1")
        assert stored is not None and stored.embeddings == VECTORS
        assert public_view(stored)["embeddings"] == [[0.5, -0.25], [1.0, 0.0]]
        chat = table.get("acme", "chat-1")
        assert chat is not None and "embeddings" not in public_view(chat)
        assert table.get("beta", "embd-1") is None  # another tenant's id
    finally:
        table.close()


# --- the simulated backend --------------------------------------------------------------------------


def test_the_simulated_backend_embeds_deterministically_with_the_dimensions_asked() -> None:
    async def scenario() -> list[httpx.Response]:
        app = create_app(SimBackendSettings(latency_s={}, default_latency_s=0.0))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            body = {"model": "emb", "input": [*TEXTS, TEXTS[0]], "dimensions": 8}
            return [
                await client.post("/v1/embeddings", json=body),
                await client.post(
                    "/v1/embeddings", json={"model": "emb", "input": "x", "encoding_format": "base64"}
                ),
                await client.post("/v1/embeddings", json={"model": "emb", "input": "x", "dimensions": 0}),
            ]

    floats, encoded, refused = asyncio.run(asyncio.wait_for(scenario(), 30))
    vectors = [item["embedding"] for item in floats.json()["data"]]
    assert [len(v) for v in vectors] == [8, 8, 8]
    assert vectors[0] == vectors[2] != vectors[1]
    assert vectors[0] == vector(TEXTS[0], 8)
    assert math.isclose(sum(v * v for v in vectors[0]), 1.0, rel_tol=1e-5)
    assert floats.json()["usage"]["prompt_tokens"] > 0
    assert isinstance(encoded.json()["data"][0]["embedding"], str)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "dimensions"
    assert json.loads(floats.text)["object"] == "list"
