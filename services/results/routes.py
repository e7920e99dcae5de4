"""The results service's HTTP answers: ``GET /v1/requests/{request_id}`` (with ``?wait=`` a long
poll), ``GET /v1/requests/{request_id}/events`` (Server-Sent Events) and ``GET /healthz``.

A result is read by its tenant only: the key names the tenant, the store is keyed (tenant,
request_id), and another tenant's id is answered exactly like an id nobody sent (404, or a long
poll and an event stream that wait like for a request still queued), so a caller cannot even learn
that it exists. In open mode (no tenants file, loopback only) the optional ``?tenant=`` names the
tenant (``default`` when left out); with a key it must be the key's.

Each tenant's reads are limited per minute (``limits.reads_per_minute``, a token bucket: 429 with
Retry-After past it), and so are its long polls and event streams held at once
(``limits.long_polls``, ``limits.event_streams``: 429 with Retry-After, before anything is held);
other tenants are unaffected. The requests in progress are bounded by the app
(`inferq.tenancy.held_connections`).

Waiting is the waiter hub's (`inferq.delivery`): the caller is registered, then the store is
read, then the caller sleeps until the reply topic's reader (`consumer.ResultConsumer`) wakes it
or the bound passes. A client that disconnects is unregistered at once.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from opentelemetry.metrics import Meter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.delivery.hub import HubFullError, WaiterHub
from inferq.delivery.metrics import DeliveryMetrics
from inferq.delivery.sse import (
    CLIENT_GONE_STATUS,
    ClientGoneError,
    EventStreamResponse,
    Gapped,
    Restarted,
    Step,
    follow,
    sse_event,
    until_disconnected,
)
from inferq.messaging.limits import ID_PATTERN, MAX_ID_CHARS, MAX_TENANT_CHARS
from inferq.messaging.records import InferenceChunk, InferenceResult
from inferq.results.store import ResultStore
from inferq.results.view import public_view
from inferq.tenancy.errors import AuthenticationError
from inferq.tenancy.held_connections import native_refusal
from inferq.tenancy.holds import HeldKind, HeldResources, HoldRefusal, Lease
from inferq.tenancy.model import Tenant
from inferq.tenancy.rate import RateLimiter, RateRefusal
from inferq.tenancy.registry import TenantRegistry

_BAD_ID = (
    f"request_id must be 1-{MAX_ID_CHARS} characters of letters, digits, '.', '_', ':' or '-' "
    "(ingest never accepts another)"
)
_BAD_TENANT = (
    f"tenant must be given once, 1-{MAX_TENANT_CHARS} characters of letters, digits, '.', '_', ':' or '-'"
)


_WAIT = re.compile(r"[0-9]{1,4}")
# Past `max_waiters`, a caller is told to come back after this.
_BUSY_RETRY_AFTER_S = 1


@dataclass(frozen=True)
class WaitLimits:
    """Bounds of waiting callers: the largest ``?wait=``, an event stream's length and keep-alive."""

    max_wait_s: int = 60
    events_max_s: float = 300.0
    keepalive_s: float = 15.0


@dataclass(frozen=True)
class _Scope:
    label: str
    tenant: str
    request_id: str
    # The caller's tenant as the file in force lists it (its limits); open mode's tenant in open mode.
    holder: Tenant


@dataclass(frozen=True)
class Health:
    """What ``/healthz`` says: `status` ("ok", "starting", or what stopped) and whether the service
    can do its job (503 when not)."""

    status: str
    healthy: bool = True


class ReadMetrics:
    """`inferq_results_reads_total{tenant, outcome}` (found, not_found) and
    `inferq_results_refused_total{reason[, tenant]}` (unauthenticated_*, not_entitled, invalid,
    reads_per_minute, held_limit);
    `tenant` is a name from the tenants file or ``default`` in open mode, never the caller's text."""

    def __init__(self, meter: Meter) -> None:
        self._reads = meter.create_counter(
            "inferq_results_reads_total", description="results read, by outcome"
        )
        self._refused = meter.create_counter(
            "inferq_results_refused_total", description="result reads refused, by reason"
        )

    def read(self, tenant: str, *, found: bool) -> None:
        self._reads.add(1, {"tenant": tenant, "outcome": "found" if found else "not_found"})

    def refused(self, reason: str, tenant: str | None = None) -> None:
        self._refused.add(1, {"reason": reason} if tenant is None else {"reason": reason, "tenant": tenant})


class ResultRoutes:
    """Handlers reading `store` (off the event loop, see `ResultStore`); `health` says whether the
    consumer is running (and the retention task); `tenants` says who is calling; `holds` counts
    the long polls and event streams each tenant holds; `reads` is the per-tenant read rate (none:
    not limited)."""

    def __init__(
        self,
        store: ResultStore,
        health: Callable[[], Health],
        *,
        tenants: TenantRegistry,
        metrics: ReadMetrics,
        hub: WaiterHub | None = None,
        limits: WaitLimits | None = None,
        delivery: DeliveryMetrics | None = None,
        holds: HeldResources | None = None,
        reads: RateLimiter | None = None,
    ) -> None:
        self._store = store
        self._holds = holds or HeldResources()
        self._reads = reads
        self._health = health
        self._tenants = tenants
        self._metrics = metrics
        self._hub = hub or WaiterHub()
        self._limits = limits or WaitLimits()
        self._delivery = delivery

    async def get_result(self, request: Request) -> Response:
        """200 with `public_view` of the caller's first result for the id; 401 without a valid key;
        403 for a ``?tenant=`` that is not the key's; 404 while there is none (or past retention, or
        it is another tenant's); 422 for an id no request can have, which is not echoed back.

        With ``?wait=N`` (whole seconds, 0 to `max_wait_s`; else 422) the answer waits up to N s for
        the outcome: 200 as soon as it exists, else 202 ``{"status": "PENDING"}`` at the bound; 429
        with Retry-After when the tenant holds its ``long_polls`` already; 503 with Retry-After
        when too many callers are waiting."""
        scope = self._scope(request)
        if isinstance(scope, Response):
            return scope
        wait_s = self._wait_s(request, scope.label)
        if isinstance(wait_s, Response):
            return wait_s
        if not wait_s:
            return await self._read_now(scope)
        lease = self._hold(scope, "long_polls")
        if isinstance(lease, Response):
            return lease
        try:
            with lease, self._hub.waiting(scope.tenant, scope.request_id, chunks=False) as waiter:
                # Registered first, then the store: a result written in between still wakes us.
                result = await self._store.get(scope.tenant, scope.request_id)
                if result is None:
                    result = await until_disconnected(request, waiter.result(wait_s))
        except HubFullError:
            return _busy()
        except ClientGoneError:
            self._ended("long_poll", "disconnected")
            return Response(status_code=CLIENT_GONE_STATUS)
        self._ended("long_poll", "bound" if result is None else "outcome")
        self._metrics.read(scope.label, found=result is not None)
        if result is None:
            body = {"request_id": scope.request_id, "status": "PENDING", "waited_s": wait_s}
            return JSONResponse(body, status_code=202)
        return JSONResponse(public_view(result))

    async def events(self, request: Request) -> Response:
        """``text/event-stream`` of the request's outcome: ``event: chunk`` for each piece of a
        streamed answer (``{request_id, attempt, seq, index, delta, model}``, with ``tool_calls``,
        ``refusal``, ``logprobs``, ``finish_reason`` when it has them; from the start of the
        answer when the stream is still in progress), ``event: restart`` when the answer started
        over (a retry: drop the text so far), then ``event: result`` with the outcome (as
        ``GET /v1/requests/{id}``) and the end; ``event: timeout`` and the end after
        `events_max_s` without it. Scoped like a read: another tenant's id streams like an id
        still queued. 401/403/422/429 as a read; 429 with Retry-After when the tenant holds its
        ``event_streams`` already (before the stream starts); 503 when too many callers are waiting."""
        scope = self._scope(request)
        if isinstance(scope, Response):
            return scope
        if self._hub.waiters >= self._hub.max_waiters:
            return _busy()
        lease = self._hold(scope, "event_streams")
        if isinstance(lease, Response):
            return lease
        # The lease is given back once the response is over, however it ended (`on_close`).
        return EventStreamResponse(self._event_stream(scope), on_close=lease.release)

    def _hold(self, scope: _Scope, kind: HeldKind) -> Lease | Response:
        """One of the caller's `kind` held, or its 429 (the limit named, Retry-After)."""
        lease = self._holds.acquire(scope.holder, kind)
        if isinstance(lease, HoldRefusal):
            self._metrics.refused("held_limit", scope.label)
            return native_refusal("", lease)
        return lease

    def _ended(self, endpoint: str, how: str) -> None:
        if self._delivery is not None:
            self._delivery.ended(endpoint, how)

    async def _event_stream(self, scope: _Scope) -> AsyncIterator[bytes]:
        how = "disconnected"
        try:
            with self._hub.waiting(scope.tenant, scope.request_id, replay=True) as waiter:
                stored = await self._store.get(scope.tenant, scope.request_id)
                steps = (
                    follow(waiter, bound_s=self._limits.events_max_s, keepalive_s=self._limits.keepalive_s)
                    if stored is None
                    else _stored(stored)
                )
                async for step in steps:
                    if isinstance(step, bytes):
                        yield step
                    elif isinstance(step, InferenceResult):
                        self._metrics.read(scope.label, found=True)
                        how = "outcome"
                        yield sse_event(public_view(step), event="result")
                    elif isinstance(step, Restarted):
                        restart = {"request_id": step.chunk.request_id, "attempt": step.chunk.attempt}
                        yield sse_event(restart, event="restart")
                        yield sse_event(_chunk_view(step.chunk), event="chunk")
                    elif isinstance(step, Gapped):
                        # A chunk before it was lost: its seq says so; the result holds the whole text.
                        yield sse_event(_chunk_view(step.chunk), event="chunk")
                    elif isinstance(step, InferenceChunk):
                        yield sse_event(_chunk_view(step), event="chunk")
                    else:
                        self._metrics.read(scope.label, found=False)
                        how = "bound"
                        pending = {"request_id": scope.request_id, "status": "PENDING"}
                        yield sse_event(pending, event="timeout")
        except HubFullError:
            how = "error"
            yield sse_event({"error": "too many callers are waiting; reconnect later"}, event="error")
        finally:
            self._ended("events", how)

    async def _read_now(self, scope: _Scope) -> Response:
        result = await self._store.get(scope.tenant, scope.request_id)
        self._metrics.read(scope.label, found=result is not None)
        if result is None:
            error = f"no result for request_id {scope.request_id!r} (yet)"
            return JSONResponse({"error": error}, status_code=404)
        return JSONResponse(public_view(result))

    def _wait_s(self, request: Request, label: str) -> int | Response:
        given = request.query_params.getlist("wait")
        if not given:
            return 0
        if len(given) > 1 or not _WAIT.fullmatch(given[0]) or int(given[0]) > self._limits.max_wait_s:
            self._metrics.refused("invalid", label)
            error = f"wait must be given once, whole seconds from 0 to {self._limits.max_wait_s}"
            return JSONResponse({"error": error}, status_code=422)
        return int(given[0])

    def _scope(self, request: Request) -> _Scope | Response:
        """Who asks for which request: the tenant from the key (or open mode's ?tenant=) and the id,
        or the refusal (401, 403, 422)."""
        try:
            principal = self._tenants.authenticate(request.headers.getlist("authorization"))
        except AuthenticationError as exc:
            self._metrics.refused(f"unauthenticated_{exc.reason}")
            challenge = 'Bearer realm="inferq"' + (
                "" if exc.reason == "missing" else ', error="invalid_token"'
            )
            return JSONResponse({"error": str(exc)}, status_code=401, headers={"WWW-Authenticate": challenge})
        label = principal.label
        tenant = principal.name
        if principal.authenticated and self._reads is not None:
            refusal = self._reads.take(principal.name)
            if refusal is not None:
                self._metrics.refused("reads_per_minute", label)
                return _rate_limited(refusal)
        named = request.query_params.getlist("tenant")
        if named:
            if len(named) > 1 or len(named[0]) > MAX_TENANT_CHARS or not ID_PATTERN.fullmatch(named[0]):
                self._metrics.refused("invalid", label)
                return JSONResponse({"error": _BAD_TENANT}, status_code=422)
            if principal.authenticated and named[0] != principal.name:
                self._metrics.refused("not_entitled", label)
                error = f"this key belongs to tenant {principal.name!r}; leave tenant out or send that"
                return JSONResponse({"error": error}, status_code=403)
            tenant = named[0]
        request_id = request.path_params["request_id"]
        if not isinstance(request_id, str) or not ID_PATTERN.fullmatch(request_id):
            self._metrics.refused("invalid", label)
            return JSONResponse({"error": _BAD_ID}, status_code=422)
        return _Scope(label=label, tenant=tenant, request_id=request_id, holder=principal.tenant)

    async def healthz(self, _: Request) -> Response:
        """200 "ok" once consuming ("starting" before); 503 when the consumer or the retention task
        has stopped. With how many results are stored."""
        health = self._health()
        body = {"status": health.status, "results": await self._store.count()}
        return JSONResponse(body, status_code=200 if health.healthy else 503)


async def _stored(result: InferenceResult) -> AsyncIterator[Step]:
    """The steps of an outcome already stored: the outcome."""
    yield result


def _chunk_view(chunk: InferenceChunk) -> dict[str, object]:
    """A chunk record as the event stream gives it: its choice's `index`, and besides the text the
    tool-call deltas, refusal, logprobs and finish_reason when it carries them (OpenAI's shapes)."""
    view: dict[str, object] = {
        "request_id": chunk.request_id,
        "attempt": chunk.attempt,
        "seq": chunk.seq,
        "index": chunk.choice_index,
        "delta": chunk.delta,
        "model": chunk.model,
    }
    extras = {
        "tool_calls": chunk.openai_tool_calls(),
        "refusal": chunk.refusal,
        "logprobs": chunk.openai_logprobs(),
        "finish_reason": chunk.finish_reason,
    }
    return view | {name: value for name, value in extras.items() if value is not None}


def _rate_limited(refusal: RateRefusal) -> Response:
    """429 for a tenant whose reads per minute are spent (the shape of ingest's rate refusal)."""
    body = {
        "error": f"tenant {refusal.tenant!r} is over its quota of {refusal.requests_per_minute} reads per "
        f"minute (limits.{refusal.quota}); retry later",
        "quota": refusal.quota,
        "tenant": refusal.tenant,
        "limit": refusal.requests_per_minute,
        "burst": refusal.burst,
        "retry_after_s": refusal.retry_after_s,
    }
    return JSONResponse(body, status_code=429, headers={"Retry-After": str(refusal.retry_after_s)})


def _busy() -> Response:
    return JSONResponse(
        {"error": "too many callers are waiting for outcomes; retry later"},
        status_code=503,
        headers={"Retry-After": str(_BUSY_RETRY_AFTER_S)},
    )
