"""Held connections of one tenant against another's reads, on real results and ingest processes
and the real broker (issue 23, item 1).

Before: ``GET /v1/requests/{any id}/events`` held a connection for 300 s whether or not the id
existed, and uvicorn's connection limit counted every tenant's together: tenant A opened 1,100
event streams for ids that do not exist, and tenant B's next GETs of its own finished result got
503. Now each tenant holds at most its own limits (``event_streams``, ``long_polls``,
``connections``): past them A gets 429 with Retry-After naming the limit, and B is served (200)
throughout. B's read latency while A holds everything it may, against B alone, is printed (a
figure for the issue's closing note; noisy machine: not asserted). A control run with the issue's
set-up (no per-tenant limits, uvicorn's old 1,000) shows the same flood still gets B 503s. On
ingest, A's streamed chats and waiting calls past its limits get OpenAI's 429 while B submits and
streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from inferq.messaging.kafka_config import KafkaSettings
from inferq.tenancy.held import MAX_HELD
from inferq.tools.stack.process import ServiceProcess
from tests.hostile.conftest import HostileFigures
from tests.support.fakes import a_result
from tests.support.inprocess import free_port
from tests.support.replies import produce_replies
from tests.support.sse import sse_events
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# A's kinds at their defaults (50 streams, 50 long polls), its requests in progress below their sum.
A_LIMITS = {"connections": 80, "event_streams": 50, "long_polls": 50}
A = TenantSpec("a", limits=A_LIMITS)
B = TenantSpec("b")
# The issue's measurement: A's event streams for ids that do not exist.
ISSUE_STREAMS = 1_100
B_READS = 200
AREA = "held limits"


@dataclass
class Results:
    url: str
    process: ServiceProcess
    figures: HostileFigures
    statuses: dict[str, list[int]] = field(default_factory=dict)

    def client(self, spec: TenantSpec, **kwargs: object) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=2_000, max_keepalive_connections=2_000)
        return httpx.AsyncClient(
            base_url=self.url, headers=spec.headers(), timeout=30, limits=limits, **kwargs
        )

    def saw(self, case: str, response: httpx.Response, *, control: bool = False) -> httpx.Response:
        """Records `response` under `case` (a 5xx counts against the suite unless it is the
        control's, which reproduces the issue's harm on purpose)."""
        self.figures.tried(f"{AREA}: {case}")
        if response.status_code >= 500 and not control:
            self.figures.server_errors += 1
        self.statuses.setdefault(case, []).append(response.status_code)
        return response


@contextlib.contextmanager
def results_service(
    kafka_settings: KafkaSettings,
    tmp_path: Path,
    figures: HostileFigures,
    tenants: tuple[TenantSpec, ...],
    **env: str,
) -> Iterator[Results]:
    """A results process on the broker with `tenants`, B's finished result stored."""
    port = free_port()
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "INFERQ_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "INFERQ_TENANTS_FILE": str(write_tenants(tmp_path / "tenants.toml", *tenants)),
        "INFERQ_RESULTS_DB_PATH": str(tmp_path / "results.db"),
        "INFERQ_RESULTS_GROUP_ID": f"{kafka_settings.topic_prefix}-results",
        **env,
    }
    process = ServiceProcess(
        "results", ["results", "--port", str(port), "--metrics-port", "0"], tmp_path / "results.log", env=env
    )
    url = f"http://127.0.0.1:{port}"
    try:
        process.start()
        process.wait_http_ready(f"{url}/healthz", 60)
        produce_replies(kafka_settings, "b-done", [a_result("b-done", tenant="b", output="B's answer")])
        wait_until(
            lambda: httpx.get(f"{url}/v1/requests/b-done", headers=B.headers(), timeout=10).status_code,
            "B's result stored",
            30,
            done=lambda status: status == 200,
        )
        yield Results(url, process, figures)
    finally:
        assert process.stop() == 0


@pytest.fixture
def results(
    kafka_settings: KafkaSettings, tmp_path: Path, hostile_figures: HostileFigures
) -> Iterator[Results]:
    with results_service(kafka_settings, tmp_path, hostile_figures, (A, B)) as svc:
        yield svc


# A's streams from a process of their own, so that B's reads are timed on a client that is not
# busy opening them: prints the status of each (its stream held `hold_s` when it was opened).
_FLOOD = """
import asyncio, json, sys, httpx

async def main(url, key, count, hold_s):
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60, limits=limits) as client:
        async def one(i):
            try:
                async with client.stream("GET", f"/v1/requests/flood-{i}/events") as response:
                    if response.status_code == 200:
                        await asyncio.sleep(hold_s)
                    return response.status_code
            except httpx.HTTPError as exc:
                return type(exc).__name__
        print(json.dumps(await asyncio.gather(*(one(i) for i in range(count)))))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
"""


async def flood_while_b_reads(
    svc: Results, b: httpx.AsyncClient, case: str, *, hold_s: float, control: bool = False
) -> tuple[list[int | str], list[float]]:
    """A opens `ISSUE_STREAMS` event streams at once from another process while B reads its result
    one read after another; A's statuses and B's latencies (ms) until A's last answer."""
    flood = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _FLOOD,
        svc.url,
        A.key,
        str(ISSUE_STREAMS),
        str(hold_s),
        stdout=asyncio.subprocess.PIPE,
    )
    waited = asyncio.ensure_future(flood.communicate())
    latencies: list[float] = []
    while not waited.done() or len(latencies) < 5:
        started = time.perf_counter()
        response = svc.saw(case, await b.get("/v1/requests/b-done"), control=control)
        latencies.append((time.perf_counter() - started) * 1000)
        if response.status_code == 200:
            assert response.json()["output"] == "B's answer"
        await asyncio.sleep(0.01)
    out, _ = await waited
    statuses: list[int | str] = json.loads(out)
    return statuses, latencies


def assert_429(response: httpx.Response, kind: str) -> None:
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["retry-after"]) <= 5
    body = response.json()
    assert (body["quota"], body["tenant"], body["limit"]) == (kind, "a", A_LIMITS[kind])
    assert f"limits.{kind} = {A_LIMITS[kind]}" in body["error"]
    assert A.key not in response.text


async def b_reads(svc: Results, b: httpx.AsyncClient, case: str, count: int) -> list[float]:
    """`count` GETs of B's finished result, one after another; their latencies in ms."""
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        response = svc.saw(case, await b.get("/v1/requests/b-done"))
        latencies.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.text
        assert response.json()["output"] == "B's answer"
    return latencies


def figure(name: str, latencies: list[float], statuses: list[int | str]) -> str:
    q = statistics.quantiles(latencies, n=20)
    counts = {s: statuses.count(s) for s in sorted(set(statuses), key=str)}
    return f"{name}: n={len(latencies)} p50={statistics.median(latencies):.1f} ms p95={q[18]:.1f} ms {counts}"


@contextlib.asynccontextmanager
async def held_streams(
    svc: Results, client: httpx.AsyncClient, ids: list[str]
) -> AsyncIterator[list[httpx.Response]]:
    """Event streams of `ids`, open (status read) until the block ends."""
    async with contextlib.AsyncExitStack() as stack:
        opened = []
        for rid in ids:
            response = await stack.enter_async_context(client.stream("GET", f"/v1/requests/{rid}/events"))
            opened.append(svc.saw("A's streams up to its limit", response))
        yield opened


async def held_polls(client: httpx.AsyncClient, count: int) -> list[asyncio.Task[httpx.Response]]:
    """`count` long polls of ids that do not exist, once A's requests in progress are at its
    `connections` (a plain read of A's is then refused)."""

    def poll(i: int) -> asyncio.Task[httpx.Response]:
        return asyncio.create_task(client.get(f"/v1/requests/nobody-poll-{i}", params={"wait": 60}))

    polls = [poll(i) for i in range(count)]
    async with asyncio.timeout(30):
        while True:
            probe = await client.get("/v1/requests/probe")
            for i, task in enumerate(polls):
                if not task.done():
                    continue
                how = task.exception() or task.result()
                # The probe is a request in progress too: a poll that arrived while it held A's
                # last connection was refused for it, and is asked again.
                refused = isinstance(how, httpx.Response) and how.status_code == 429
                if refused and how.json().get("quota") == "connections":
                    polls[i] = poll(i)
                    continue
                # Any other end holds nothing: say how, rather than wait out the bound.
                raise AssertionError(f"a long poll ended early: {how!r}")
            if probe.status_code == 429 and not any(task.done() for task in polls):
                break
            await asyncio.sleep(0.05)
    assert_429(probe, "connections")
    return polls


async def cancel(tasks: list[asyncio.Task[httpx.Response]]) -> None:
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def events_of_stream(response: httpx.Response) -> list[tuple[str, object]]:
    return list(sse_events([line async for line in response.aiter_lines()]))


def test_one_tenant_past_its_held_limits_gets_429_and_the_other_is_served(results: Results) -> None:
    svc = results
    figures: list[str] = []

    async def scenario() -> None:
        async with svc.client(A) as a, svc.client(B) as b:
            alone = await b_reads(svc, b, "B alone", B_READS)
            figures.append(figure("B alone", alone, svc.statuses["B alone"]))

            # A's event streams for ids that do not exist, up to its limit, then past it.
            ids = [f"nobody-{i}" for i in range(A_LIMITS["event_streams"])]
            async with held_streams(svc, a, ids) as streams:
                assert {r.status_code for r in streams} == {200}
                past = svc.saw("A's stream past its limit", await a.get("/v1/requests/x/events"))
                assert_429(past, "event_streams")
                # A's long polls up to its connections (80 = 50 streams + 30 polls), then past them.
                polls = await held_polls(a, A_LIMITS["connections"] - A_LIMITS["event_streams"])
                refused = svc.saw("A past its connections", await a.get("/v1/requests/x", params={"wait": 5}))
                assert_429(refused, "connections")
                assert refused.headers["connection"] == "close"

                # A holds all it may: B reads its finished result, and streams its own events.
                case = "B while A holds its limits"
                held = await b_reads(svc, b, case, B_READS)
                figures.append(figure(case, held, svc.statuses[case]))
                async with b.stream("GET", "/v1/requests/b-done/events") as own:
                    assert svc.saw("B's own event stream", own).status_code == 200
                    events = await events_of_stream(own)
                assert [name for name, _ in events] == ["result"]
                async with b.stream("GET", "/v1/requests/b-pending/events") as pending:
                    assert svc.saw("B's own event stream", pending).status_code == 200

                # The issue's measurement: A opens 1,100 more event streams at once; B reads meanwhile.
                case = "B during A's 1,100 streams"
                flooded, during = await flood_while_b_reads(svc, b, case, hold_s=5)
                svc.figures.tried(f"{AREA}: A's 1,100 streams", len(flooded))
                assert set(flooded) == {429}
                assert set(svc.statuses[case]) == {200}
                figures.append(figure(case, during, svc.statuses[case]) + f"; A got {counts(flooded)}")
                await cancel(polls)
            # What A held is given back: its connections (a plain read is served again), then
            # every one of its event streams.
            async with asyncio.timeout(30):
                while (await a.get("/v1/requests/probe")).status_code != 404:
                    await asyncio.sleep(0.05)
            again = [f"again-{i}" for i in range(A_LIMITS["event_streams"])]
            async with held_streams(svc, a, again) as reopened:
                assert {r.status_code for r in reopened} == {200}
        print("\n" + "\n".join(figures))

    asyncio.run(asyncio.wait_for(scenario(), 600))


def counts(statuses: list[int | str]) -> dict[int | str, int]:
    return {s: statuses.count(s) for s in sorted(set(statuses), key=str)}


def test_control_without_per_tenant_limits_b_gets_the_shared_503(
    kafka_settings: KafkaSettings, tmp_path: Path, hostile_figures: HostileFigures
) -> None:
    """The same flood against the issue's set-up: A's limits as high as the file allows and
    uvicorn's old 1,000. B then meets the shared limit (503), as the issue measured: the
    scenario reproduces the harm, so the 200s above are the limits' doing."""
    unlimited = TenantSpec("a", keys=A.keys, limits=dict.fromkeys(A_LIMITS, MAX_HELD))
    env = {"INFERQ_HTTP_LIMIT_CONCURRENCY": "1000"}
    with results_service(kafka_settings, tmp_path, hostile_figures, (unlimited, B), **env) as svc:

        async def scenario() -> None:
            async with svc.client(B) as b:
                case = "control: B during A's 1,100 streams, no per-tenant limits"
                # Held 15 s: a slow machine still has all of them open at once.
                flooded, during = await flood_while_b_reads(svc, b, case, hold_s=15, control=True)
                print(f"\n{figure(case, during, svc.statuses[case])}; A got {counts(flooded)}")
                assert 503 in svc.statuses[case]

        asyncio.run(asyncio.wait_for(scenario(), 300))


# On ingest: A's streamed chats and calls waiting for their answer, then its requests in progress.
A_INGEST = {"connections": 6, "streamed_chats": 3, "held_calls": 3}
WIDE = {"models": ["*"]}
A_CHATS = TenantSpec("a", entitlements=WIDE, limits=A_INGEST)
B_CHATS = TenantSpec("b", entitlements=WIDE)
CHAT = {"model": "inferq", "messages": [{"role": "user", "content": "hi"}]}
NATIVE = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}


def assert_openai_429(response: httpx.Response, kind: str) -> None:
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["retry-after"]) <= 5
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "held_limit")
    assert f"limits.{kind} = {A_INGEST[kind]}" in error["message"]
    assert A_CHATS.key not in response.text


def test_on_ingest_a_tenants_chats_past_its_limits_get_429_and_the_other_is_served(
    kafka_settings: KafkaSettings, tmp_path: Path, hostile_figures: HostileFigures
) -> None:
    """No dispatcher: every chat waits for an answer that does not come (within its deadline,
    raised to a minute), so each holds what it took for the length of the test."""
    port = free_port()
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "INFERQ_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "INFERQ_TENANTS_FILE": str(write_tenants(tmp_path / "tenants.toml", A_CHATS, B_CHATS)),
        "INFERQ_INGEST_DEADLINES_MS": '{"HIGH": 60000}',
    }
    process = ServiceProcess(
        "ingest", ["ingest", "--port", str(port), "--metrics-port", "0"], tmp_path / "ingest.log", env=env
    )
    url = f"http://127.0.0.1:{port}"
    svc = Results(url, process, hostile_figures)

    async def scenario() -> None:
        async with svc.client(A_CHATS) as a, svc.client(B_CHATS) as b, contextlib.AsyncExitStack() as held:
            for _ in range(A_INGEST["streamed_chats"]):
                stream = a.stream("POST", "/v1/chat/completions", json=CHAT | {"stream": True})
                opened = svc.saw("ingest: A's streamed chats", await held.enter_async_context(stream))
                assert opened.status_code == 200
            past = await a.post("/v1/chat/completions", json=CHAT | {"stream": True})
            assert_openai_429(svc.saw("ingest: A's streamed chat past its limit", past), "streamed_chats")
            waiting = [
                asyncio.create_task(a.post("/v1/chat/completions", json=CHAT))
                for _ in range(A_INGEST["held_calls"])
            ]
            async with asyncio.timeout(30):
                # Six requests in progress: A's next one is refused at the door.
                while (probe := await a.get("/v1/models")).status_code != 429:
                    await asyncio.sleep(0.05)
            assert_openai_429(svc.saw("ingest: A past its connections", probe), "connections")
            native = svc.saw("ingest: A past its connections", await a.post("/v1/requests", json=NATIVE))
            assert native.status_code == 429 and native.json()["quota"] == "connections"
            assert native.headers["connection"] == "close"
            # B is another tenant: its submission is accepted and its own stream opens.
            assert (
                svc.saw("ingest: B meanwhile", await b.post("/v1/requests", json=NATIVE)).status_code == 202
            )
            async with b.stream("POST", "/v1/chat/completions", json=CHAT | {"stream": True}) as own:
                assert svc.saw("ingest: B meanwhile", own).status_code == 200
            await cancel(waiting)

    try:
        process.start()
        process.wait_http_ready(f"{url}/healthz", 60)
        asyncio.run(asyncio.wait_for(scenario(), 120))
    finally:
        assert process.stop() == 0
