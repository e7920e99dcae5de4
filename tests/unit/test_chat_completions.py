"""``POST /v1/chat/completions`` and ``GET /v1/models`` with the official openai SDK, in-process: ingest
served by uvicorn on loopback with a producer that keeps what it is given, a fake reply topic the
test writes outcomes and chunks to (playing the dispatcher), the real hub and tenants with keys.

The same endpoint on the real broker and the real dispatcher: tests/e2e/test_openai_sdk.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.testclient import TestClient

from inferq.delivery.hub import WaiterHub
from inferq.ingest.app import create_app
from inferq.ingest.settings import IngestSettings
from inferq.messaging import limits
from inferq.messaging.codec import chunk_codec, request_codec, result_codec
from inferq.messaging.records import (
    CHUNK_KIND,
    KIND_HEADER,
    InferenceChunk,
    InferenceRequest,
    InferenceResult,
    Status,
    Usage,
)
from inferq.tenancy.settings import TenancySettings
from tests.support.fakes import (
    DyingResultFeed,
    FakeBacklog,
    FakeResultFeed,
    InMemoryMetrics,
    RecordingProducer,
    labels,
)
from tests.support.inprocess import served
from tests.support.loop import in_loop_within
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import eventually, wait_until

# Every model, role and parameter: the OpenAI body's values all reach ingest's checks.
WIDE = {"models": ["*"], "roles": ["user", "assistant", "system", "tool", "developer"]}
WIDE_PARAMS = dict.fromkeys(limits.ALLOWED_PARAMS, True)
# A field the API gained later that only acme may pass through (test_chat_params.py).
PASSTHROUGH = "safety_checks"
ACME = TenantSpec("acme", entitlements=WIDE, params=WIDE_PARAMS | {PASSTHROUGH: True})
BETA = TenantSpec("beta", entitlements=WIDE, params=WIDE_PARAMS)
NARROW = TenantSpec("narrow", entitlements={"models": ["inferq-fast"]})
SLOW = TenantSpec("slow", extra={"requests_per_minute": 1, "burst": 1})
TEST_TIMEOUT_S = 60
# The chat endpoint's tests (here and in the test_chat_* files) run bounded.
run = in_loop_within(TEST_TIMEOUT_S)
HI = [{"role": "user", "content": "hi"}]


def assert_refused_400(tmp_path: Path, fields: dict[str, Any], param: str | None, phrase: str) -> None:
    """A chat body with `fields` is OpenAI's 400 naming `param` and saying `phrase`; nothing is queued."""

    async def scenario(path: Path) -> None:
        async with ingest(path) as svc, svc.http() as http:
            response = await http.post(
                "/v1/chat/completions", json={"model": "inferq", "messages": HI} | fields
            )
            assert response.status_code == 400, response.text
            error = response.json()["error"]
            assert error["type"] == "invalid_request_error" and error["param"] == param, error
            assert phrase in error["message"], error
            assert svc.producer.sent == []

    run(scenario)(tmp_path)


@dataclass
class Ingest:
    url: str
    hub: WaiterHub
    producer: RecordingProducer
    replies: FakeResultFeed

    def sdk(self, spec: TenantSpec = ACME, **kwargs: Any) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=spec.key, max_retries=0, **kwargs)

    def http(self, spec: TenantSpec | None = ACME) -> httpx.AsyncClient:
        headers = spec.headers() if spec is not None else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)

    async def next_request(self, index: int = 0) -> InferenceRequest:
        """The `index`-th record produced (waiting for it, bounded)."""
        async with asyncio.timeout(10):
            while len(self.producer.sent) <= index:
                await asyncio.sleep(0.005)
        return request_codec().decode(self.producer.sent[index][1])

    def answer(self, request: InferenceRequest, output: str = "hello there", **kw: Any) -> None:
        fields: dict[str, Any] = {
            "request_id": request.request_id,
            "tier": request.tier,
            "status": Status.OK,
            "model": "inferq-fast",
            "enqueued_at_ms": request.created_at_ms,
            "dispatched_at_ms": request.created_at_ms + 1,
            "completed_at_ms": request.created_at_ms + 5,
            "attempts": 1,
            "dispatcher_id": "d1",
            "output": output,
            "usage": Usage(3, 2, 5),
            "tenant": request.tenant,
        } | kw
        self.replies.push([result_codec().encode(InferenceResult(**fields))])

    def chunks(self, request: InferenceRequest, *deltas: str, first_seq: int = 0, **kw: Any) -> None:
        records = [
            chunk_codec().encode(
                InferenceChunk(
                    **(
                        {
                            "request_id": request.request_id,
                            "tenant": request.tenant,
                            "attempt": 1,
                            "seq": first_seq + i,
                            "delta": delta,
                            "model": "inferq-fast",
                            "created_at_ms": 1,
                            "dispatcher_id": "d1",
                        }
                        | kw
                    )
                )
            )
            for i, delta in enumerate(deltas)
        ]
        self.replies.push(records, headers=[(KIND_HEADER, CHUNK_KIND)])

    async def until_waiting(self, count: int) -> None:
        await eventually(lambda: self.hub.waiters == count, f"{count} callers waiting", 10.0)


@contextlib.asynccontextmanager
async def ingest(tmp_path: Path, **settings: Any) -> AsyncIterator[Ingest]:
    tenants = write_tenants(tmp_path / "tenants.toml", ACME, BETA, NARROW, SLOW)
    producer, replies = RecordingProducer(), FakeResultFeed()
    hub = WaiterHub(max_waiters=settings.pop("max_waiters", 100))
    metrics: InMemoryMetrics | None = settings.pop("metrics", None)
    app = create_app(
        IngestSettings(tenants=TenancySettings(file=tenants), **settings),
        producer=producer,
        check_topics=False,
        backlog=FakeBacklog(),
        follow_feed=lambda: replies,
        hub=hub,
        metrics_meter=metrics.meter if metrics is not None else None,
    )
    async with served(app) as url:
        yield Ingest(url, hub, producer, replies)


async def answered(svc: Ingest, call: Coroutine[Any, Any, Any], **answer: Any) -> Any:
    """Run `call` while playing the dispatcher: its request is answered OK (or as `answer` says)."""
    index = len(svc.producer.sent)
    task = asyncio.ensure_future(call)
    svc.answer(await svc.next_request(index), **answer)
    return await task


# --- what a caller gets -------------------------------------------------------------------------


@run
async def test_the_async_sdk_gets_a_chat_completion_once_the_result_arrives(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        completion = await answered(
            svc, client.chat.completions.create(model="inferq", messages=HI), output="hello there"
        )
        assert completion.choices[0].message.content == "hello there"
        assert completion.choices[0].finish_reason == "stop"
        assert completion.usage is not None and completion.usage.total_tokens == 5
        request = await svc.next_request(0)
        assert completion.id == request.request_id
        assert (request.tenant, request.scenario, request.tier.value, request.stream) == (
            "acme",
            "realtime_chat",
            "HIGH",
            False,
        )
        assert request.model is None  # "inferq": the tier's model
        assert svc.hub.waiters == 0
        await client.close()


@run
async def test_the_sync_sdk_works_unchanged(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = openai.OpenAI(base_url=f"{svc.url}/v1", api_key=ACME.key, max_retries=0)
        call = asyncio.to_thread(
            client.chat.completions.create,
            model="inferq-fast",
            messages=[{"role": "system", "content": "be brief"}, *HI],
            temperature=0.2,
            max_tokens=50,
            stop=["\n"],
            seed=7,
            user="end-user-42",
        )
        completion = await answered(svc, call, output="sync hello")
        assert completion.choices[0].message.content == "sync hello"
        request = await svc.next_request(0)
        assert request.model == "inferq-fast"
        assert request.decoded_params() == {
            "temperature": 0.2,
            "max_tokens": 50,
            "stop": ["\n"],
            "seed": 7,
            "user": "end-user-42",
        }
        # The session key is a hash of the end user; the backend gets `user` as it was sent.
        assert request.session_id is not None and "end-user-42" not in request.session_id
        assert [m.role for m in request.messages] == ["system", "user"]
        client.close()


@run
async def test_a_stream_carries_the_chunks_as_they_come_then_done(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        stream = await client.chat.completions.create(
            model="inferq", messages=HI, stream=True, stream_options={"include_usage": True}
        )
        request = await svc.next_request(0)
        assert request.stream is True
        pieces: list[str] = []
        finish: list[str | None] = []
        usage = None
        svc.chunks(request, "Hel", "lo")
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finish.append(choice.finish_reason)
                if "".join(pieces) == "Hello":
                    # The first chunks reached the caller before the rest was even written.
                    svc.chunks(request, "Hel", first_seq=0)  # a repeat: dropped
                    svc.chunks(request, " world", first_seq=2)
                    svc.answer(request, output="Hello world!")
        assert "".join(pieces) == "Hello world!"  # the result's tail ("!") was not in a chunk
        assert finish[-1] == "stop"
        assert usage is not None and usage.total_tokens == 5
        assert svc.hub.waiters == 0
        await client.close()


@run
async def test_a_stream_from_a_dispatcher_that_does_not_stream_gets_the_whole_answer(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        stream = await client.chat.completions.create(model="inferq", messages=HI, stream=True)
        svc.answer(await svc.next_request(0), output="all at once")
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "all at once"
        await client.close()


@run
async def test_a_stream_that_started_over_ends_with_an_error_not_wrong_text(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        stream = await client.chat.completions.create(model="inferq", messages=HI, stream=True)
        request = await svc.next_request(0)
        svc.chunks(request, "first ", "try")
        # Another dispatcher redoes it after a crash, and answers differently.
        svc.chunks(request, "second", dispatcher_id="d2")
        svc.answer(request, output="second answer")
        with pytest.raises(openai.APIError, match="started over"):
            async for _ in stream:
                pass
        await client.close()


@pytest.mark.parametrize(
    ("arrived", "relayed"),
    [
        # Chunk 1 ("lo ") was lost: " wor" (seq 2) is not relayed, the result fills the hole.
        ((("Hel", 0), (" wor", 2)), ["", "Hel"]),
        # Chunk 0 was lost: nothing before the result, which brings the whole answer.
        (((" wor", 1), ("ld", 2)), [""]),
    ],
    ids=["middle", "first"],
)
def test_a_lost_chunk_leaves_no_hole_the_rest_comes_with_the_result(
    tmp_path: Path, arrived: tuple[tuple[str, int], ...], relayed: list[str]
) -> None:
    async def scenario() -> None:
        async with ingest(tmp_path) as svc:
            client = svc.sdk()
            stream = await client.chat.completions.create(model="inferq", messages=HI, stream=True)
            request = await svc.next_request(0)
            for text, seq in arrived:
                svc.chunks(request, text, first_seq=seq)
            svc.answer(request, output="Hello world")
            pieces = [c.choices[0].delta.content or "" async for c in stream if c.choices]
            assert "".join(pieces) == "Hello world"
            assert pieces[: len(relayed)] == relayed
            assert pieces[len(relayed)] == "Hello world"[len("".join(relayed)) :], "the rest in one piece"
            await client.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "arrived",
    [
        (("half an ans", 0),),
        # After a lost chunk nothing more is relayed; the stream must still not end silently cut
        # (the SDK ends a stream without [DONE] or an error as if it were whole).
        (("Hel", 0), (" wor", 2)),
    ],
    ids=["in-order", "after-a-lost-chunk"],
)
def test_a_stream_whose_dispatcher_died_ends_with_an_error_event_not_a_hang(
    tmp_path: Path, arrived: tuple[tuple[str, int], ...]
) -> None:
    async def scenario() -> None:
        async with ingest(tmp_path, chat_stream_idle_s=0.5) as svc:
            client = svc.sdk()
            stream = await client.chat.completions.create(model="inferq", messages=HI, stream=True)
            request = await svc.next_request(0)
            for text, seq in arrived:
                svc.chunks(request, text, first_seq=seq)
            with pytest.raises(openai.APIError, match="stopped arriving"):
                async for _ in stream:
                    pass
            await svc.until_waiting(0)
            await client.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (Status.EXPIRED, 504, "deadline_exceeded"),
        (Status.FAILED, 502, "backend_failed"),
        (Status.EVICTED, 503, "evicted"),
        (Status.REJECTED, 403, "rejected"),
    ],
)
def test_an_outcome_that_is_not_ok_is_an_openai_error(
    tmp_path: Path, status: Status, code: int, error: str
) -> None:
    async def scenario() -> None:
        async with ingest(tmp_path) as svc:
            client = svc.sdk()
            with pytest.raises(openai.APIStatusError) as raised:
                await answered(
                    svc,
                    client.chat.completions.create(model="inferq", messages=HI),
                    status=status,
                    output=None,
                )
            assert raised.value.status_code == code
            assert raised.value.body["code"] == error  # type: ignore[index]
            if code != 503:
                # Sending it again would queue it again for nothing: the SDK is told not to retry.
                assert raised.value.response.headers["x-should-retry"] == "false"
            # A streaming caller gets the same error as an event.
            stream = await client.chat.completions.create(model="inferq", messages=HI, stream=True)
            svc.answer(await svc.next_request(1), status=status, output=None)
            with pytest.raises(openai.APIError) as in_stream:
                async for _ in stream:
                    pass
            assert in_stream.value.body["code"] == error  # type: ignore[index]
            await client.close()

    asyncio.run(asyncio.wait_for(scenario(), TEST_TIMEOUT_S))


@run
async def test_no_outcome_within_the_deadline_is_504_naming_the_request(tmp_path: Path) -> None:
    async with ingest(tmp_path, chat_grace_s=0) as svc:
        client = svc.sdk()
        with pytest.raises(openai.APIStatusError) as raised:
            await client.chat.completions.create(
                model="inferq", messages=HI, extra_headers={"X-Inferq-Deadline-Ms": "200"}
            )
        assert raised.value.status_code == 504
        request = await svc.next_request(0)
        assert request.request_id in raised.value.message
        assert raised.value.response.headers["x-inferq-request-id"] == request.request_id
        assert svc.hub.waiters == 0
        await client.close()


@run
async def test_another_tenants_result_for_the_same_id_does_not_answer(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        task = asyncio.ensure_future(client.chat.completions.create(model="inferq", messages=HI))
        request = await svc.next_request(0)
        await svc.until_waiting(1)
        svc.answer(replace(request, tenant="beta"), output="beta's secret")
        svc.answer(request, output="acme's own")
        completion = await task
        assert completion.choices[0].message.content == "acme's own"
        await client.close()


# --- where inferq's choices come from ----------------------------------------------------------


@run
async def test_priority_scenario_and_deadline_from_headers_or_metadata(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk()
        calls = [
            client.chat.completions.create(
                model="inferq",
                messages=HI,
                extra_headers={"X-Inferq-Priority": "low", "X-Inferq-Deadline-Ms": "60000"},
            ),
            client.chat.completions.create(
                model="inferq", messages=HI, metadata={"inferq_scenario": "emotion_analysis", "trace": "x"}
            ),
            client.chat.completions.create(
                model="inferq",
                messages=HI,
                extra_headers={"X-Inferq-Scenario": "morning_brief"},
                metadata={"inferq_priority": "HIGH", "inferq_deadline_ms": "9000"},
            ),
        ]
        for index, call in enumerate(calls):
            task = asyncio.ensure_future(call)
            request = await svc.next_request(index)
            svc.answer(request)
            await task
        first, second, third = (request_codec().decode(v) for _, v, _ in svc.producer.sent)
        assert (first.scenario, first.tier.value) == ("realtime_chat", "LOW")
        assert first.expire_at_ms - first.created_at_ms == 60_000
        assert (second.scenario, second.tier.value) == ("emotion_analysis", "MEDIUM")
        assert (third.scenario, third.tier.value) == ("morning_brief", "HIGH")
        assert third.expire_at_ms - third.created_at_ms == 9_000
        await client.close()


@run
async def test_the_sdks_timeout_cuts_the_deadline(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk(timeout=2.5)
        task = asyncio.ensure_future(
            client.chat.completions.create(
                model="inferq", messages=HI, metadata={"inferq_deadline_ms": "60000"}
            )
        )
        request = await svc.next_request(0)
        svc.answer(request)
        await task
        assert request.expire_at_ms - request.created_at_ms == 2_500
        await client.close()


# "NOT_GIVEN": what some Stainless SDK versions really sent (anthropic-sdk-python issue 1676).
@pytest.mark.parametrize(
    "value", ["-1", "0", "nan", "inf", "1e9", "9" * 40, "", "2.5s", "\u0661", "NOT_GIVEN"]
)
def test_a_malformed_sdk_timeout_is_ignored(tmp_path: Path, value: str) -> None:
    async def scenario() -> None:
        async with ingest(tmp_path) as svc, svc.http() as http:
            task = asyncio.ensure_future(
                http.post(
                    "/v1/chat/completions",
                    json={"model": "inferq", "messages": HI},
                    headers={"X-Stainless-Read-Timeout": value.encode()},  # type: ignore[dict-item]
                )
            )
            request = await svc.next_request(0)
            svc.answer(request)
            assert (await task).status_code == 200
            assert request.expire_at_ms - request.created_at_ms == 5_000  # HIGH's own

    asyncio.run(asyncio.wait_for(scenario(), TEST_TIMEOUT_S))


# --- refusals, OpenAI-shaped ----------------------------------------------------------------------


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "inferq", "messages": HI} | fields


HOSTILE: list[tuple[str, Any, dict[str, str], int, str | None]] = [
    # (case, body, headers, status, param)
    ("n over its bound", body(n=limits.MAX_CHOICES + 1), {}, 400, "n"),
    ("n not int", body(n="1"), {}, 400, "n"),
    ("stream not bool", body(stream="yes"), {}, 400, "stream"),
    (
        "stream_options without stream",
        body(stream_options={"include_usage": True}),
        {},
        400,
        "stream_options",
    ),
    ("temperature too high", body(temperature=2.5), {}, 400, "temperature"),
    ("temperature a string", body(temperature="hot"), {}, 400, "temperature"),
    ("top_p out of range", body(top_p=-0.1), {}, 400, "top_p"),
    ("max_tokens zero", body(max_tokens=0), {}, 400, "max_tokens"),
    ("max_tokens huge", body(max_completion_tokens=10**12), {}, 400, "max_completion_tokens"),
    ("two max_tokens", body(max_tokens=5, max_completion_tokens=6), {}, 400, "max_completion_tokens"),
    ("five stops", body(stop=["a", "b", "c", "d", "e"]), {}, 400, "stop"),
    ("seed float", body(seed=1.5), {}, 400, "seed"),
    ("response_format", body(response_format={"type": "json_schema"}), {}, 400, "response_format"),
    ("no messages", body(messages=[]), {}, 400, "messages"),
    ("bad role", body(messages=[{"role": "robot", "content": "x"}]), {}, 400, "messages[0].role"),
    ("content not text", body(messages=[{"role": "user", "content": 5}]), {}, 400, "messages[0].content"),
    (
        "image part",
        body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
        {},
        400,
        None,
    ),
    ("too many messages", body(messages=HI * 257), {}, 400, "messages"),
    ("content too long", body(messages=[{"role": "user", "content": "x" * 512_001}]), {}, 400, None),
    ("lone surrogate", b'{"model":"inferq","messages":[{"role":"user","content":"\\ud800"}]}', {}, 400, None),
    ("tools", body(tools=[{"type": "function"}]), {}, 400, "tools"),
    ("unknown key", body(frobnicate=True), {}, 400, "frobnicate"),
    ("17 metadata pairs", body(metadata={f"k{i}": "v" for i in range(17)}), {}, 400, "metadata"),
    ("metadata value too long", body(metadata={"k": "v" * 513}), {}, 400, None),
    ("metadata value not a string", body(metadata={"k": 5}), {}, 400, None),
    ("model too long", body(model="m" * 129), {}, 400, "model"),
    ("model missing", {"messages": HI}, {}, 400, "model"),
    ("user not a string", body(user=5), {}, 400, "user"),
    ("not an object", [1, 2], {}, 400, None),
    ("not json", b"{nope", {}, 400, None),
    ("priority unknown", body(), {"X-Inferq-Priority": "URGENT"}, 400, "x-inferq-priority"),
    ("scenario not an id", body(), {"X-Inferq-Scenario": "a b"}, 400, "x-inferq-scenario"),
    ("deadline negative", body(), {"X-Inferq-Deadline-Ms": "-5"}, 400, "x-inferq-deadline-ms"),
    ("deadline float", body(), {"X-Inferq-Deadline-Ms": "1e3"}, 400, "x-inferq-deadline-ms"),
    ("deadline too far", body(), {"X-Inferq-Deadline-Ms": str(8 * 86_400_000)}, 400, "x-inferq-deadline-ms"),
    ("deadline zero", body(), {"X-Inferq-Deadline-Ms": "0"}, 400, "x-inferq-deadline-ms"),
    (
        "header and metadata disagree",
        body(metadata={"inferq_priority": "LOW"}),
        {"X-Inferq-Priority": "HIGH"},
        400,
        "x-inferq-priority",
    ),
    (
        "metadata deadline not a number",
        body(metadata={"inferq_deadline_ms": "soon"}),
        {},
        400,
        "metadata.inferq_deadline_ms",
    ),
    ("unknown model", body(model="gpt-4o"), {}, 404, "model"),
]


def test_every_hostile_body_or_header_is_refused_like_openai_and_nothing_is_queued(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with ingest(tmp_path) as svc, svc.http() as http:
            for case, payload, headers, status, param in HOSTILE:
                content = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                response = await http.post(
                    "/v1/chat/completions",
                    content=content,
                    headers={"content-type": "application/json"} | headers,
                )
                assert response.status_code == status, (case, response.text)
                error = response.json()["error"]
                assert set(error) == {"message", "type", "param", "code"}, case
                assert error["type"] == "invalid_request_error", case
                if param is not None:
                    assert error["param"] == param, (case, error)
            # Twice the same header, a body over the size limit.
            twice = await http.post(
                "/v1/chat/completions",
                json=body(),
                headers=[("X-Inferq-Priority", "LOW"), ("X-Inferq-Priority", "HIGH")],  # type: ignore[arg-type]
            )
            assert twice.status_code == 400
            big = await http.post(
                "/v1/chat/completions", json=body(messages=[{"role": "user", "content": "x" * 2_000_000}])
            )
            assert big.status_code == 413
            assert big.json()["error"]["type"] == "invalid_request_error"
            assert svc.producer.sent == []
            assert svc.hub.waiters == 0

    asyncio.run(asyncio.wait_for(scenario(), TEST_TIMEOUT_S))


@run
async def test_no_key_is_401_and_the_sdk_says_authentication(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        for key in ("iq_nobodyhasthis", "x" * 10_000):
            client = openai.AsyncOpenAI(base_url=f"{svc.url}/v1", api_key=key, max_retries=0)
            with pytest.raises(openai.AuthenticationError):
                await client.chat.completions.create(model="inferq", messages=HI)
            with pytest.raises(openai.AuthenticationError):
                await client.models.list()
            await client.close()
        async with svc.http(None) as anonymous:
            refused = await anonymous.post("/v1/chat/completions", json=body())
            assert refused.status_code == 401
            assert refused.json()["error"]["code"] == "invalid_api_key"
        assert svc.producer.sent == []


@run
async def test_a_model_the_tenant_may_not_use_is_403_and_models_lists_only_its_own_chat_and_embedding(
    tmp_path: Path,
) -> None:
    async with ingest(tmp_path) as svc:
        narrow, acme = svc.sdk(NARROW), svc.sdk(ACME)
        assert [m.id async for m in acme.models.list()] == [
            "inferq",
            "inferq-accurate",
            "inferq-cheap",
            "inferq-fast",
            "text-embedding-3-small",  # the embedding model, after the chat models
        ]
        # A tenant whose models do not include the embedding model is not shown it.
        assert [m.id async for m in narrow.models.list()] == ["inferq", "inferq-fast"]
        with pytest.raises(openai.PermissionDeniedError):
            await narrow.chat.completions.create(model="inferq-accurate", messages=HI)
        assert svc.producer.sent == []
        await narrow.close()
        await acme.close()


@run
async def test_over_the_tenants_rate_is_429_with_retry_after(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc:
        client = svc.sdk(SLOW)
        await answered(svc, client.chat.completions.create(model="inferq", messages=HI))
        with pytest.raises(openai.RateLimitError) as raised:
            await client.chat.completions.create(model="inferq", messages=HI)
        assert int(raised.value.response.headers["retry-after"]) >= 1
        assert raised.value.body["type"] == "rate_limit_error"  # type: ignore[index]
        await client.close()


@run
async def test_too_many_waiting_callers_is_503_and_nothing_is_queued(tmp_path: Path) -> None:
    async with ingest(tmp_path, max_waiters=1) as svc:
        client = svc.sdk()
        first = asyncio.ensure_future(client.chat.completions.create(model="inferq", messages=HI))
        await svc.until_waiting(1)
        with pytest.raises(openai.InternalServerError) as raised:
            await client.chat.completions.create(model="inferq", messages=HI)
        assert raised.value.status_code == 503
        assert len(svc.producer.sent) == 1
        svc.answer(await svc.next_request(0))
        await first
        await client.close()


@run
async def test_a_caller_that_goes_away_frees_its_waiter_and_tasks(tmp_path: Path) -> None:
    metrics = InMemoryMetrics()
    async with ingest(tmp_path, metrics=metrics) as svc:
        baseline = len(asyncio.all_tasks())
        client = svc.sdk()
        waiting = asyncio.ensure_future(client.chat.completions.create(model="inferq", messages=HI))
        stream = await client.chat.completions.create(model="inferq", messages=HI, stream=True)
        await svc.until_waiting(2)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await stream.close()
        await client.close()
        await svc.until_waiting(0)
        async with asyncio.timeout(10):
            while len(asyncio.all_tasks()) > baseline:
                await asyncio.sleep(0.02)
        # Their requests were queued all the same: the outcome is read from the results service.
        assert len(svc.producer.sent) == 2
        ended = metrics.points("inferq_waits_total")
        for endpoint in ("completion", "stream"):
            assert ended[labels(service="ingest", endpoint=endpoint, ended="disconnected")] == 1
        assert metrics.points("inferq_waiters") == {labels(service="ingest"): 0}


def test_ingest_is_unhealthy_once_its_reply_follower_died() -> None:
    app = create_app(
        IngestSettings(),
        producer=RecordingProducer(),
        check_topics=False,
        backlog=FakeBacklog(),
        follow_feed=DyingResultFeed,
    )
    with TestClient(app) as client:
        health = wait_until(
            lambda: client.get("/healthz"),
            "the follower's death noticed",
            10,
            done=lambda r: r.status_code != 200,
        )
        assert health.status_code == 503
        assert health.json() == {"status": "follower stopped"}


class NeverReadyFeed(FakeResultFeed):
    """A reply topic whose consumer never gets going (Kafka down when ingest started)."""

    async def start(self) -> None:
        await asyncio.Event().wait()


def test_completions_are_refused_until_the_reply_topic_is_followed_and_nothing_is_queued() -> None:
    producer = RecordingProducer()
    app = create_app(
        IngestSettings(),
        producer=producer,
        check_topics=False,
        backlog=FakeBacklog(),
        follow_feed=NeverReadyFeed,
    )
    with TestClient(app) as client:
        refused = client.post("/v1/chat/completions", json=body())
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "not_following"
        # inferq's own API does not wait for outcomes: it is served as before.
        assert client.post("/v1/requests", json={"scenario": "chat", "messages": HI}).status_code == 202
    assert len(producer.sent) == 1


@pytest.mark.parametrize("value", ["true", 1, None, [True]])
def test_a_submission_asks_for_streaming_with_a_json_boolean_only(value: Any) -> None:
    producer = RecordingProducer()
    app = create_app(IngestSettings(), producer=producer, check_topics=False, backlog=FakeBacklog())
    with TestClient(app) as client:
        request = {"scenario": "realtime_chat", "messages": HI}
        refused = client.post("/v1/requests", json=request | {"stream": value})
        assert refused.status_code == 422
        assert refused.json()["problems"][0]["field"] == "stream"
        assert client.post("/v1/requests", json=request | {"stream": True}).status_code == 202
    assert [request_codec().decode(v).stream for _, v, _ in producer.sent] == [True]
