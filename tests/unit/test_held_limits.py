"""Per-tenant limits on what a request can hold (issue 23, item 1), in-process.

The counter (`HeldResources`): a lease per held resource, refused past the tenant's limit, given
back once however the holder ended (a cancelled task included), one tenant's count never another's.
Then each endpoint, served by uvicorn on loopback: past a limit the tenant gets 429 with
Retry-After naming the limit, in its API's error shape, while another tenant is served; a slot is
given back when its stream ends or its client goes away. The same on the real services and broker:
tests/hostile/test_held_limits.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from inferq.delivery.hub import WaiterHub
from inferq.ingest.app import create_app as create_ingest
from inferq.ingest.settings import IngestSettings
from inferq.results.app import create_app as create_results
from inferq.results.settings import ResultsSettings
from inferq.tenancy.held import UNBOUNDED, HeldLimits
from inferq.tenancy.holds import HELD_KINDS, HeldResources, HoldRefusal, Lease
from inferq.tenancy.model import OPEN_TENANT
from inferq.tenancy.settings import TenancySettings
from tests.support.clock import ManualClock
from tests.support.fakes import FakeBacklog, FakeResultFeed, InMemoryMetrics, RecordingProducer, labels
from tests.support.inprocess import served
from tests.support.loop import in_loop_within
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import eventually

TEST_TIMEOUT_S = 60
WIDE = {"models": ["*"]}
# A holds at most 2 of each kind and 4 requests in progress; B has the defaults.
A = TenantSpec(
    "a",
    entitlements=WIDE,
    limits={
        "connections": 4,
        "event_streams": 2,
        "long_polls": 2,
        "streamed_chats": 2,
        "held_calls": 2,
        "reads_per_minute": 60,
    },
)
B = TenantSpec("b", entitlements=WIDE)
HI = [{"role": "user", "content": "hi"}]


def tenant(name: str, **limits: int) -> Any:
    return replace(OPEN_TENANT, name=name, limits=HeldLimits(**limits))


def assert_held_429(response: httpx.Response, kind: str, limit: int) -> None:
    """The native 429: the limit named with its value, Retry-After in whole seconds."""
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["retry-after"]) <= 5
    body = response.json()
    assert (body["quota"], body["tenant"], body["limit"]) == (kind, "a", limit)
    assert f"limits.{kind} = {limit}" in body["error"]
    assert A.key not in response.text


def assert_openai_429(response: httpx.Response, kind: str, limit: int) -> None:
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["retry-after"]) <= 5
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "held_limit")
    assert f"limits.{kind} = {limit}" in error["message"]
    assert A.key not in response.text


# --- the counter ---------------------------------------------------------------------------------


def test_a_tenant_holds_up_to_its_limit_and_a_release_frees_one() -> None:
    holds, a = HeldResources(), tenant("a", event_streams=2)
    first, second = holds.acquire(a, "event_streams"), holds.acquire(a, "event_streams")
    assert isinstance(first, Lease) and isinstance(second, Lease)
    refused = holds.acquire(a, "event_streams")
    assert refused == HoldRefusal("a", "event_streams", 2, 1)
    first.release()
    first.release()  # once only: a second release gives nothing back twice
    assert holds.in_use("a", "event_streams") == 1
    assert isinstance(holds.acquire(a, "event_streams"), Lease)
    assert holds.refused_counts() == {("a", "event_streams"): 1}


def test_one_tenant_at_its_limit_leaves_other_tenants_and_kinds_alone() -> None:
    holds, a, b = HeldResources(), tenant("a", long_polls=1), tenant("b", long_polls=1)
    assert isinstance(holds.acquire(a, "long_polls"), Lease)
    assert isinstance(holds.acquire(a, "long_polls"), HoldRefusal)
    assert isinstance(holds.acquire(b, "long_polls"), Lease)
    assert isinstance(holds.acquire(a, "event_streams"), Lease)


def test_a_lowered_limit_refuses_new_holds_at_once_and_old_ones_run_out() -> None:
    holds = HeldResources()
    leases = [holds.acquire(tenant("a", held_calls=3), "held_calls") for _ in range(3)]
    lowered = tenant("a", held_calls=1)  # the file reloaded with a lower limit
    assert isinstance(holds.acquire(lowered, "held_calls"), HoldRefusal)
    for lease in leases[:2]:
        assert isinstance(lease, Lease)
        lease.release()
    assert isinstance(holds.acquire(lowered, "held_calls"), HoldRefusal)
    assert isinstance(leases[2], Lease)
    leases[2].release()
    assert isinstance(holds.acquire(lowered, "held_calls"), Lease)


def test_a_cancelled_holder_gives_its_lease_back() -> None:
    holds, a = HeldResources(), tenant("a", streamed_chats=1)

    async def holder(started: asyncio.Event) -> None:
        lease = holds.acquire(a, "streamed_chats")
        assert isinstance(lease, Lease)
        with lease:
            started.set()
            await asyncio.sleep(3600)

    async def scenario() -> None:
        started = asyncio.Event()
        task = asyncio.create_task(holder(started))
        await started.wait()
        assert holds.in_use("a", "streamed_chats") == 1
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert holds.in_use("a", "streamed_chats") == 0

    asyncio.run(scenario())


# --- the results service -------------------------------------------------------------------------


@dataclass
class Results:
    url: str
    hub: WaiterHub
    clock: ManualClock
    tenants_file: Path

    def client(self, spec: TenantSpec) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=spec.headers(), timeout=30)

    async def until_waiting(self, count: int) -> None:
        await eventually(lambda: self.hub.waiters, f"{count} waiters", 10, done=lambda n: n == count)


@contextlib.asynccontextmanager
async def results(tmp_path: Path) -> AsyncIterator[Results]:
    tenants = write_tenants(tmp_path / "tenants.toml", A, B)
    hub, feed, clock = WaiterHub(max_waiters=100), FakeResultFeed(), ManualClock(now_s=1000.0)
    app = create_results(
        ResultsSettings(
            db_path=tmp_path / "r.db", tenants=TenancySettings(file=tenants, reload_interval_s=0.05)
        ),
        check_topics=False,
        feed=lambda: feed,
        hub=hub,
        rate_clock_s=clock.seconds,
    )
    async with served(app) as url:
        yield Results(url, hub, clock, tenants)


@contextlib.asynccontextmanager
async def open_streams(client: httpx.AsyncClient, paths: list[str]) -> AsyncIterator[list[httpx.Response]]:
    """Each path's event stream, open (headers read) until the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(client.stream("GET", path)) for path in paths]


@in_loop_within(TEST_TIMEOUT_S)
async def test_event_streams_past_the_limit_are_429_and_another_tenant_streams(tmp_path: Path) -> None:
    async with results(tmp_path) as svc, svc.client(A) as a, svc.client(B) as b:
        async with open_streams(a, ["/v1/requests/n1/events", "/v1/requests/n2/events"]) as held:
            assert [r.status_code for r in held] == [200, 200]
            assert_held_429(await a.get("/v1/requests/n3/events"), "event_streams", 2)
            async with open_streams(b, ["/v1/requests/mine/events"]) as theirs:
                assert theirs[0].status_code == 200
            assert (await b.get("/v1/requests/mine")).status_code == 404  # served, not refused
        # The streams' connections closed: their slots are free again.
        await svc.until_waiting(0)
        async with open_streams(a, ["/v1/requests/n3/events"]) as again:
            assert again[0].status_code == 200


@in_loop_within(TEST_TIMEOUT_S)
async def test_a_reload_applies_a_tenants_new_limit_to_the_next_request(tmp_path: Path) -> None:
    held = ["/v1/requests/n1/events", "/v1/requests/n2/events"]
    async with results(tmp_path) as svc, svc.client(A) as a, open_streams(a, held):
        assert_held_429(await a.get("/v1/requests/n3/events"), "event_streams", 2)
        write_tenants(svc.tenants_file, replace(A, limits=A.limits | {"event_streams": 3}), B)
        async with contextlib.AsyncExitStack() as stack:
            # The next request after the reload is allowed a third stream.
            async with asyncio.timeout(10):
                while True:
                    third = await stack.enter_async_context(a.stream("GET", "/v1/requests/n3/events"))
                    if third.status_code == 200:
                        break
                    await asyncio.sleep(0.05)
            assert_held_429(await a.get("/v1/requests/n4/events"), "event_streams", 3)


@in_loop_within(TEST_TIMEOUT_S)
async def test_long_polls_past_the_limit_are_429_and_a_cancelled_poll_frees_its_slot(tmp_path: Path) -> None:
    async with results(tmp_path) as svc, svc.client(A) as a, svc.client(B) as b:
        polls = [asyncio.create_task(a.get(f"/v1/requests/p{i}", params={"wait": 60})) for i in range(2)]
        await svc.until_waiting(2)
        assert_held_429(await a.get("/v1/requests/p3", params={"wait": 5}), "long_polls", 2)
        # A read that holds nothing is still served, and B's long poll is another tenant's.
        assert (await a.get("/v1/requests/p3")).status_code == 404
        assert (await b.get("/v1/requests/p3", params={"wait": 1})).status_code == 202
        polls[0].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await polls[0]
        await svc.until_waiting(1)
        assert (await a.get("/v1/requests/p3", params={"wait": 1})).status_code == 202
        polls[1].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await polls[1]


@in_loop_within(TEST_TIMEOUT_S)
async def test_requests_in_progress_past_connections_are_429_and_close_the_connection(tmp_path: Path) -> None:
    async with results(tmp_path) as svc, svc.client(A) as a, svc.client(B) as b:
        async with open_streams(a, ["/v1/requests/c1/events", "/v1/requests/c2/events"]):
            polls = [asyncio.create_task(a.get(f"/v1/requests/c{i}", params={"wait": 60})) for i in (3, 4)]
            await svc.until_waiting(4)
            refused = await a.get("/v1/requests/c5")
            assert_held_429(refused, "connections", 4)
            assert refused.headers["connection"] == "close"
            assert (await b.get("/v1/requests/c5")).status_code == 404
            # A caller without a valid key holds nothing and is told so, not refused as A.
            stranger = await a.get("/v1/requests/c5", headers={"authorization": "Bearer iq_nobodys"})
            assert stranger.status_code == 401
            for poll in polls:
                poll.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poll
        await svc.until_waiting(0)
        assert (await a.get("/v1/requests/c5")).status_code == 404


@in_loop_within(TEST_TIMEOUT_S)
async def test_reads_past_the_tenants_rate_are_429_with_retry_after(tmp_path: Path) -> None:
    async with results(tmp_path) as svc, svc.client(A) as a, svc.client(B) as b:
        statuses = [(await a.get("/v1/requests/r")).status_code for _ in range(61)]
        assert statuses[:60] == [404] * 60
        assert statuses[60] == 429
        refused = await a.get("/v1/requests/r")
        body = refused.json()
        assert (body["quota"], body["limit"]) == ("reads_per_minute", 60)
        assert refused.headers["retry-after"] == "1"
        assert (await b.get("/v1/requests/r")).status_code == 404
        svc.clock.advance(s=1.0)  # a token a second at 60 a minute
        assert (await a.get("/v1/requests/r")).status_code == 404


# --- ingest ----------------------------------------------------------------------------------------


@dataclass
class Ingest:
    url: str
    hub: WaiterHub
    producer: RecordingProducer

    def client(self, spec: TenantSpec) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, headers=spec.headers(), timeout=30)

    async def until_waiting(self, count: int) -> None:
        await eventually(lambda: self.hub.waiters, f"{count} waiters", 10, done=lambda n: n == count)


@contextlib.asynccontextmanager
async def ingest(tmp_path: Path, metrics: InMemoryMetrics | None = None) -> AsyncIterator[Ingest]:
    tenants = write_tenants(tmp_path / "tenants.toml", A, B)
    producer, hub = RecordingProducer(), WaiterHub(max_waiters=100)
    app = create_ingest(
        IngestSettings(tenants=TenancySettings(file=tenants)),
        producer=producer,
        check_topics=False,
        backlog=FakeBacklog(),
        follow_feed=FakeResultFeed,
        hub=hub,
        metrics_meter=metrics.meter if metrics is not None else None,
    )
    async with served(app) as url:
        yield Ingest(url, hub, producer)


def chat(stream: bool) -> dict[str, Any]:
    return {"model": "inferq", "messages": HI, "stream": stream}


@in_loop_within(TEST_TIMEOUT_S)
async def test_streamed_chats_past_the_limit_are_429_and_nothing_is_queued(tmp_path: Path) -> None:
    metrics = InMemoryMetrics()
    async with ingest(tmp_path, metrics) as svc, svc.client(A) as a, svc.client(B) as b:
        async with open_streams_post(a, [chat(True), chat(True)]) as held:
            assert [r.status_code for r in held] == [200, 200]
            assert len(svc.producer.sent) == 2
            assert_openai_429(await a.post("/v1/chat/completions", json=chat(True)), "streamed_chats", 2)
            assert len(svc.producer.sent) == 2  # a refused call costs nothing and is not queued
            # A call that is not streamed holds another kind; B is another tenant.
            async with open_streams_post(b, [chat(True)]) as theirs:
                assert theirs[0].status_code == 200
        await svc.until_waiting(0)
        async with open_streams_post(a, [chat(True)]) as again:
            assert again[0].status_code == 200
    assert metrics.points("inferq_held_refused_total")[labels(tenant="a", kind="streamed_chats")] == 1
    assert metrics.points("inferq_held")[labels(tenant="a", kind="streamed_chats")] == 0
    assert metrics.points("inferq_ingest_refused_total")[labels(reason="held_limit", tenant="a")] == 1


@in_loop_within(TEST_TIMEOUT_S)
async def test_calls_waiting_past_held_calls_are_429_for_chats_and_embeddings(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc, svc.client(A) as a, svc.client(B) as b:
        waiting = [asyncio.create_task(a.post("/v1/chat/completions", json=chat(False))) for _ in range(2)]
        await svc.until_waiting(2)
        assert_openai_429(await a.post("/v1/chat/completions", json=chat(False)), "held_calls", 2)
        embedding = await a.post("/v1/embeddings", json={"model": "inferq", "input": "hi"})
        assert_openai_429(embedding, "held_calls", 2)
        assert len(svc.producer.sent) == 2
        other = asyncio.create_task(b.post("/v1/chat/completions", json=chat(False)))
        await svc.until_waiting(3)  # B's call is queued and waits
        for task in [*waiting, other]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await svc.until_waiting(0)
        # The callers that went away gave their slots back: A may hold 2 again.
        waiting = [asyncio.create_task(a.post("/v1/chat/completions", json=chat(False))) for _ in range(2)]
        await svc.until_waiting(2)
        for task in waiting:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@in_loop_within(TEST_TIMEOUT_S)
async def test_connections_past_the_limit_are_429_in_each_apis_shape(tmp_path: Path) -> None:
    async with ingest(tmp_path) as svc, svc.client(A) as a, svc.client(B) as b:
        calls = [asyncio.create_task(a.post("/v1/chat/completions", json=chat(False))) for _ in range(2)]
        async with open_streams_post(a, [chat(True), chat(True)]):
            await svc.until_waiting(4)
            assert_openai_429(await a.post("/v1/chat/completions", json=chat(False)), "connections", 4)
            native = await a.post("/v1/requests", json={"scenario": "realtime_chat", "messages": HI})
            assert_held_429(native, "connections", 4)
            accepted = await b.post("/v1/requests", json={"scenario": "realtime_chat", "messages": HI})
            assert accepted.status_code == 202
        for task in calls:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await svc.until_waiting(0)
        accepted = await a.post("/v1/requests", json={"scenario": "realtime_chat", "messages": HI})
        assert accepted.status_code == 202


@contextlib.asynccontextmanager
async def open_streams_post(
    client: httpx.AsyncClient, bodies: list[dict[str, Any]]
) -> AsyncIterator[list[httpx.Response]]:
    """Each streamed chat, open (headers read) until the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(client.stream("POST", "/v1/chat/completions", json=body))
            for body in bodies
        ]


def test_open_modes_one_tenant_is_bound_only_by_the_process() -> None:
    # No other tenant to protect: per-tenant limits would only cut a local run's capacity.
    assert OPEN_TENANT.limits == UNBOUNDED and UNBOUNDED.held_calls > HeldLimits().held_calls


def test_every_held_kind_is_a_limit_of_the_tenants_file() -> None:
    assert set(HELD_KINDS) <= set(HeldLimits.names())
