"""Long poll and event stream of the results service, served by uvicorn on loopback: a fake reply-topic
feed (the service's reader of results: it stores them and wakes the hub) and a fake chunk feed (its
chunk reader, started by the first event stream), the real store and hub, tenants with keys.

What a caller notices: an answer as soon as the outcome exists, chunks in order, 202 or a timeout
event at the bound, another tenant's id like an id nobody sent, refusals for hostile parameters, and
that going away frees what the service held for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka.errors import KafkaConnectionError

from inferq.delivery.hub import WaiterHub
from inferq.messaging.codec import chunk_codec, result_codec
from inferq.messaging.records import CHUNK_KIND, KIND_HEADER, InferenceChunk, InferenceResult
from inferq.results.app import create_app
from inferq.results.settings import ResultsSettings
from inferq.tenancy.settings import TenancySettings
from tests.support.fakes import FakeResultFeed, result_record
from tests.support.inprocess import served
from tests.support.loop import in_loop_within
from tests.support.sse import events_of
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import eventually

ACME, BETA = TenantSpec("acme"), TenantSpec("beta")
TEST_TIMEOUT_S = 60


def result_of(tenant: str, request_id: str, output: str = "the answer") -> bytes:
    record = result_record(request_id) | {"tenant": tenant, "output": output}
    return result_codec().encode(InferenceResult.from_record(record))


def chunk_of(tenant: str, request_id: str, seq: int, delta: str, **kw: Any) -> bytes:
    fields: dict[str, Any] = {
        "request_id": request_id,
        "tenant": tenant,
        "attempt": 1,
        "seq": seq,
        "delta": delta,
        "model": "inferq-fast",
        "created_at_ms": 1,
        "dispatcher_id": "d1",
    } | kw
    return chunk_codec().encode(InferenceChunk(**fields))


CHUNK_HEADERS = [(KIND_HEADER, CHUNK_KIND)]


@dataclass
class Service:
    url: str
    hub: WaiterHub
    replies: FakeResultFeed
    chunks: FakeResultFeed

    def client(self, spec: TenantSpec | None = ACME, **kwargs: Any) -> httpx.AsyncClient:
        headers = spec.headers() if spec is not None else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, **kwargs)

    async def until_waiting(self, count: int) -> None:
        await eventually(
            lambda: self.hub.waiters, f"{count} waiters", 10, interval_s=0.01, done=lambda n: n == count
        )

    async def stream_chunks(self, values: list[bytes], key: str | None = None) -> None:
        """`values` on the chunk topic, returned once the chunk reader has read them (as the
        dispatcher writes a stream's chunks well before its result)."""
        handed_out = self.chunks.handed_out
        self.chunks.push(values, headers=CHUNK_HEADERS, key=key)
        await eventually(
            lambda: self.chunks.handed_out, "chunks read", 10, interval_s=0.01, done=lambda n: n > handed_out
        )


@contextlib.asynccontextmanager
async def service(tmp_path: Path, **settings: Any) -> AsyncIterator[Service]:
    tenants = write_tenants(tmp_path / "tenants.toml", ACME, BETA)
    hub = WaiterHub(max_waiters=settings.pop("max_waiters", 100))
    replies = FakeResultFeed()
    chunks = settings.pop("chunks", None) or FakeResultFeed("inferq.chunks")
    app = create_app(
        ResultsSettings(db_path=tmp_path / "r.db", tenants=TenancySettings(file=tenants), **settings),
        check_topics=False,
        feed=lambda: replies,
        chunk_feed=lambda _: chunks,
        hub=hub,
    )
    async with served(app) as url:
        yield Service(url, hub, replies, chunks)


@in_loop_within(TEST_TIMEOUT_S)
async def test_a_long_poll_answers_as_soon_as_the_reader_stores_the_result(tmp_path: Path) -> None:
    async with service(tmp_path) as svc, svc.client() as client:
        polling = asyncio.create_task(client.get("/v1/requests/r1", params={"wait": 30}))
        await svc.until_waiting(1)
        svc.replies.push([result_of("acme", "r1", "hello")])
        response = await polling
        assert response.status_code == 200
        assert response.json()["output"] == "hello"
        assert svc.hub.waiters == 0


@in_loop_within(TEST_TIMEOUT_S)
async def test_a_woken_long_poll_and_a_later_one_answer_from_the_store(tmp_path: Path) -> None:
    async with service(tmp_path) as svc, svc.client() as client:
        polling = asyncio.create_task(client.get("/v1/requests/r2", params={"wait": 30}))
        await svc.until_waiting(1)
        svc.replies.push([result_of("acme", "r2")])
        assert (await polling).status_code == 200
        # Now stored: a later poll answers without waiting, and without ?wait it is a plain read.
        assert (await client.get("/v1/requests/r2", params={"wait": 60})).status_code == 200
        assert (await client.get("/v1/requests/r2")).status_code == 200


@in_loop_within(TEST_TIMEOUT_S)
async def test_a_long_poll_gives_202_pending_at_its_bound(tmp_path: Path) -> None:
    async with service(tmp_path) as svc, svc.client() as client:
        response = await client.get("/v1/requests/nobody-sent-this", params={"wait": 1})
        assert response.status_code == 202
        assert response.json() == {"request_id": "nobody-sent-this", "status": "PENDING", "waited_s": 1}
        assert svc.hub.waiters == 0


@in_loop_within(TEST_TIMEOUT_S)
async def test_another_tenants_result_is_like_an_id_nobody_sent(tmp_path: Path) -> None:
    async with service(tmp_path, events_max_s=1) as svc, svc.client(ACME) as acme, svc.client(BETA) as beta:
        polling = asyncio.create_task(beta.get("/v1/requests/secret", params={"wait": 1}))
        await svc.until_waiting(1)
        svc.replies.push([result_of("acme", "secret", "acme's only")])
        assert (await polling).status_code == 202
        await eventually(
            lambda: acme.get("/v1/requests/secret"), "stored", 10, done=lambda r: r.status_code == 200
        )
        assert (await beta.get("/v1/requests/secret", params={"wait": 1})).status_code == 202
        assert (await beta.get("/v1/requests/secret")).status_code == 404
        stream = await beta.get("/v1/requests/secret/events")
        assert events_of(stream.text) == [("timeout", {"request_id": "secret", "status": "PENDING"})]
        assert "acme's only" not in stream.text


@pytest.mark.parametrize(
    "params",
    [
        {"wait": "-1"},
        {"wait": "61"},
        {"wait": "99999"},
        {"wait": "1.5"},
        {"wait": "1e3"},
        {"wait": "abc"},
        {"wait": ""},
        {"wait": " 5"},
        {"wait": "\uff15"},  # a full-width 5: a digit to str.isdigit, not to the rule
        {"wait": "9" * 10_000},
        [("wait", "1"), ("wait", "2")],
    ],
    ids=repr,
)
def test_a_hostile_wait_is_422_and_waits_for_nothing(tmp_path: Path, params: Any) -> None:
    async def scenario() -> None:
        async with service(tmp_path) as svc, svc.client() as client:
            response = await client.get("/v1/requests/r1", params=params)
            assert response.status_code == 422
            assert "wait must be" in response.json()["error"]
            assert svc.hub.waiters == 0

    asyncio.run(asyncio.wait_for(scenario(), TEST_TIMEOUT_S))


@in_loop_within(TEST_TIMEOUT_S)
async def test_waiting_needs_a_key_and_a_valid_id(tmp_path: Path) -> None:
    async with service(tmp_path) as svc:
        async with svc.client(None) as anonymous:
            assert (await anonymous.get("/v1/requests/r1", params={"wait": 5})).status_code == 401
            assert (await anonymous.get("/v1/requests/r1/events")).status_code == 401
        async with svc.client() as client:
            assert (await client.get("/v1/requests/" + "x" * 200, params={"wait": 5})).status_code == 422
            assert (await client.get("/v1/requests/bad%20id/events")).status_code == 422
            assert (await client.get("/v1/requests/r1/events", params={"tenant": "beta"})).status_code == 403
        assert svc.hub.waiters == 0


@in_loop_within(TEST_TIMEOUT_S)
async def test_events_stream_chunks_in_order_then_the_result(tmp_path: Path) -> None:
    async with service(tmp_path) as svc, svc.client() as client:
        # Two pieces written before the caller connects (within the chunk reader's replay window,
        # records keyed by request_id as the dispatcher writes them) are streamed; repeats are dropped.
        svc.chunks.push(
            [chunk_of("acme", "s1", 0, "Hel"), chunk_of("acme", "s1", 1, "lo")],
            headers=CHUNK_HEADERS,
            key="s1",
        )
        async with client.stream("GET", "/v1/requests/s1/events") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            await svc.until_waiting(1)
            await svc.stream_chunks(
                [chunk_of("acme", "s1", 1, "lo"), chunk_of("acme", "s1", 2, " world")], key="s1"
            )
            await svc.stream_chunks([chunk_of("beta", "s1", 3, "not yours")], key="s1")
            svc.replies.push([result_of("acme", "s1", "Hello world")], key="s1")
            body = (await response.aread()).decode()
        got = events_of(body)
        assert [name for name, _ in got] == ["chunk", "chunk", "chunk", "result"]
        assert "".join(data["delta"] for name, data in got if name == "chunk") == "Hello world"
        assert got[-1][1]["output"] == "Hello world"
        assert svc.hub.waiters == 0


class UnreachableChunkTopic(FakeResultFeed):
    """A chunk feed that cannot start: the broker of the chunk topic is down."""

    async def start(self) -> None:
        self.events.append("feed.start")
        raise KafkaConnectionError("the chunk topic's broker is down")


@in_loop_within(TEST_TIMEOUT_S)
async def test_an_event_stream_gets_its_result_at_once_while_the_chunk_topic_is_unreachable(
    tmp_path: Path,
) -> None:
    unreachable = UnreachableChunkTopic("inferq.chunks")
    async with (
        service(tmp_path, chunks=unreachable) as svc,
        svc.client() as client,
        client.stream("GET", "/v1/requests/s9/events") as response,
    ):
        assert response.status_code == 200
        await svc.until_waiting(1)
        await eventually(lambda: unreachable.events, "the chunk reader tried to start", 5)
        svc.replies.push([result_of("acme", "s9", "whole text")], key="s9")
        async with asyncio.timeout(5):
            got = events_of((await response.aread()).decode())
    assert [name for name, _ in got] == ["result"]
    assert got[0][1]["output"] == "whole text"


@in_loop_within(TEST_TIMEOUT_S)
async def test_events_carry_each_chunks_choice_tool_call_deltas_and_end(tmp_path: Path) -> None:
    head = [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "weather", "arguments": ""}}
    ]
    async with (
        service(tmp_path) as svc,
        svc.client() as client,
        client.stream("GET", "/v1/requests/t1/events") as response,
    ):
        await svc.until_waiting(1)
        await svc.stream_chunks(
            [
                chunk_of("acme", "t1", 0, "", tool_calls=json.dumps(head)),
                chunk_of("acme", "t1", 1, "Bon", choice_index=1, finish_reason="stop"),
                chunk_of("acme", "t1", 2, "", refusal="no", finish_reason="tool_calls"),
            ]
        )
        svc.replies.push([result_of("acme", "t1", "")])
        got = events_of((await response.aread()).decode())
    chunks = [data for name, data in got if name == "chunk"]
    assert [(c["index"], c["delta"], c.get("finish_reason"), c.get("refusal")) for c in chunks] == [
        (0, "", None, None),
        (1, "Bon", "stop", None),
        (0, "", "tool_calls", "no"),
    ]
    assert chunks[0]["tool_calls"] == head
    assert "tool_calls" not in chunks[1] and "logprobs" not in chunks[1], "only what a chunk carries"


@in_loop_within(TEST_TIMEOUT_S)
async def test_events_say_when_the_answer_starts_over(tmp_path: Path) -> None:
    async with service(tmp_path) as svc, svc.client() as client:
        async with client.stream("GET", "/v1/requests/s2/events") as response:
            await svc.until_waiting(1)
            await svc.stream_chunks(
                [
                    chunk_of("acme", "s2", 0, "first try"),
                    chunk_of("acme", "s2", 0, "second", attempt=2, dispatcher_id="d2"),
                ]
            )
            svc.replies.push([result_of("acme", "s2", "second")])
            got = events_of((await response.aread()).decode())
        assert [name for name, _ in got] == ["chunk", "restart", "chunk", "result"]
        assert got[1][1] == {"request_id": "s2", "attempt": 2}


@in_loop_within(TEST_TIMEOUT_S)
async def test_events_of_a_stored_result_is_the_result_alone(tmp_path: Path) -> None:
    async with service(tmp_path) as svc, svc.client() as client:
        svc.replies.push([result_of("acme", "done")])
        await eventually(
            lambda: client.get("/v1/requests/done"), "stored", 10, done=lambda r: r.status_code == 200
        )
        got = events_of((await client.get("/v1/requests/done/events")).text)
        assert [name for name, _ in got] == ["result"]


@in_loop_within(TEST_TIMEOUT_S)
async def test_a_quiet_stream_is_kept_alive_and_ends_with_a_timeout_event(tmp_path: Path) -> None:
    async with service(tmp_path, events_max_s=1.0, events_keepalive_s=0.2) as svc, svc.client() as client:
        body = (await client.get("/v1/requests/quiet/events")).text
        assert ": waiting" in body
        assert events_of(body) == [("timeout", {"request_id": "quiet", "status": "PENDING"})]
        assert svc.hub.waiters == 0


@in_loop_within(TEST_TIMEOUT_S)
async def test_a_client_that_goes_away_frees_its_waiter_and_its_tasks(tmp_path: Path) -> None:
    # No grace: the chunk reader the event stream started stops with it (its tasks are counted too).
    async with service(tmp_path, chunk_reader_grace_s=0) as svc:
        baseline = len(asyncio.all_tasks())
        async with svc.client() as client:
            polling = asyncio.create_task(client.get("/v1/requests/r1", params={"wait": 60}))
            async with client.stream("GET", "/v1/requests/r2/events") as response:
                assert response.status_code == 200
                await svc.until_waiting(2)
            # The event stream's connection is closed when its block ends; the poll is cancelled.
            await svc.until_waiting(1)
            polling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await polling
        # Both waiters freed long before the poll's 60 s bound, and no task left behind.
        await svc.until_waiting(0)
        await eventually(
            lambda: len(asyncio.all_tasks()), "no task left behind", 10, done=lambda n: n <= baseline
        )


@in_loop_within(TEST_TIMEOUT_S)
async def test_too_many_waiters_is_503_with_retry_after(tmp_path: Path) -> None:
    async with service(tmp_path, max_waiters=1) as svc, svc.client() as client:
        polling = asyncio.create_task(client.get("/v1/requests/r1", params={"wait": 30}))
        await svc.until_waiting(1)
        for path in ("/v1/requests/r2?wait=5", "/v1/requests/r2/events"):
            refused = await client.get(path)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
        svc.replies.push([result_of("acme", "r1")])
        assert (await polling).status_code == 200
