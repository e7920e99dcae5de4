"""What the OpenAI endpoints (chat completions, embeddings) share for a call through the queue,
while its caller holds the connection: `SubmitEndpoint`'s steps (the caller, its rate and body),
the body parsed and its record made (the endpoint's), within the tenant's entitlements and its
deadline cut to the SDK's timeout (`sdk_patience_ms`); one of the tenant's ``streamed_chats`` or
``held_calls`` taken (429 past its limit, before anything is produced: a refused call costs
nothing and is not queued) and held until the answer ends; a waiter registered in the delivery hub
for (tenant, request_id) before the record is produced, so its outcome cannot slip by; the
produce. Then the wait for the outcome, bounded by the request's deadline plus `grace_s` (the
dispatcher answers EXPIRED itself by then) and by `max_wait_s`: past it 504 ``wait_exceeded``,
the request still queued (its outcome is ``GET /v1/requests/{id}`` on the results service). A
client that disconnects frees its waiter at once; its request still runs.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from inferq.delivery.hub import HubFullError, Waiter, WaiterHub
from inferq.delivery.metrics import DeliveryMetrics
from inferq.delivery.sse import CLIENT_GONE_STATUS, ClientGoneError, until_disconnected
from inferq.ingest.chat import answers
from inferq.ingest.chat.body import sdk_patience_ms
from inferq.ingest.chat.errors import NotFollowingError, WaitersFullError
from inferq.ingest.deadlines import wait_s, within_patience
from inferq.ingest.errors import IngestError
from inferq.ingest.submit import SubmitEndpoint
from inferq.ingest.tenants import TenantGate
from inferq.messaging.records import InferenceRequest, InferenceResult
from inferq.tenancy.auth import Principal

B = TypeVar("B")

_RESULTS_HINT = "GET /v1/requests/{id} on the results service gives its outcome"


def results_hint(request_id: str) -> str:
    """Where a caller who stopped waiting finds the outcome."""
    return _RESULTS_HINT.replace("{id}", request_id)


@dataclass(frozen=True)
class Held(Generic[B]):
    """A call queued while its caller waits: the parsed body, the record, its waiter (held until
    `scope` closes), the response headers and how long the caller may be held."""

    body: B
    queued: InferenceRequest
    waiter: Waiter
    scope: ExitStack
    headers: dict[str, str]
    bound_s: float


class HeldCalls:
    """The shared steps; `hub` is fed by ingest's reply-topic follower, and `following` says whether
    it reads yet (until then calls are refused 503: an outcome written before it reads would be
    missed)."""

    def __init__(
        self,
        submit: SubmitEndpoint,
        hub: WaiterHub,
        gate: TenantGate,
        *,
        clock_ms: Callable[[], int],
        grace_s: float,
        max_wait_s: float,
        following: Callable[[], bool] = lambda: True,
        delivery: DeliveryMetrics | None = None,
    ) -> None:
        self.submit = submit
        self.gate = gate
        self._hub = hub
        self._clock_ms = clock_ms
        self._grace_s = grace_s
        self._max_wait_s = max_wait_s
        self._following = following
        self._delivery = delivery

    async def queue(
        self,
        request: Request,
        parse: Callable[[bytes, Principal], B],
        record_of: Callable[[B, Principal], InferenceRequest],
        *,
        chunks: Callable[[B], bool] = lambda _: False,
    ) -> Held[B] | Response:
        """The call `request` asks for, queued and waited for (`parse` reads its body, `record_of`
        makes its record, `chunks` says whether it is streamed: its waiter takes the chunks too, and
        it holds one of the tenant's ``streamed_chats`` instead of ``held_calls``); the
        refusal's response (OpenAI's error shape) when it is not queued."""
        if not self._following():
            return answers.refusal_error(NotFollowingError()).response()
        principal: Principal | None = None
        scope = ExitStack()
        try:
            principal = self.submit.caller(request)
            body = parse(await self.submit.body(request, principal), principal)
            queued = self._within_patience(record_of(body, principal), principal, request)
            streamed = chunks(body)
            scope.enter_context(self.gate.hold(principal, "streamed_chats" if streamed else "held_calls"))
            # Waiting before the record exists: its outcome cannot slip by.
            try:
                waiter = scope.enter_context(
                    self._hub.waiting(queued.tenant, queued.request_id, chunks=streamed)
                )
            except HubFullError as exc:
                raise WaitersFullError() from exc
            await self.submit.publish(queued, idempotency_key=None)
        except IngestError as exc:
            scope.close()
            self.submit.refused(exc, principal)
            return answers.refusal_error(exc).response()
        except BaseException:
            # Cancelled (shutdown) or broken while publishing: the waiter must not outlive us.
            scope.close()
            raise
        rid = queued.request_id
        headers = {"x-inferq-request-id": rid, "x-request-id": rid, "x-inferq-tier": queued.tier.value}
        bound_s = wait_s(
            queued.expire_at_ms, self._clock_ms(), grace_s=self._grace_s, max_wait_s=self._max_wait_s
        )
        return Held(body, queued, waiter, scope, headers, bound_s)

    def _waiting(self, queued: InferenceRequest, *, chunks: bool) -> AbstractContextManager[Waiter]:
        return self._hub.waiting(queued.tenant, queued.request_id, chunks=chunks)

    def _within_patience(
        self, record: InferenceRequest, principal: Principal, request: Request
    ) -> InferenceRequest:
        """`record` as the tenant may send it, its deadline then cut to the SDK's timeout. Its
        deadline can only be asked as a relative one (a header): a deadline the tenant may not
        have is named so (the tier's own is within the tenant's cap already)."""
        record = self.submit.entitled(record, principal, deadline_asked=True)
        patience_ms = sdk_patience_ms(request.headers)
        expire_at_ms = within_patience(record.created_at_ms, record.expire_at_ms, patience_ms)
        return record if expire_at_ms == record.expire_at_ms else replace(record, expire_at_ms=expire_at_ms)

    async def outcome(self, request: Request, held: Held[B], endpoint: str) -> InferenceResult | Response:
        """The call's result once it arrives; the response for a caller gone (499) or a wait past
        its bound (504 ``wait_exceeded``). `endpoint` names the wait in the delivery metrics."""
        try:
            with held.scope:
                result = await until_disconnected(request, held.waiter.result(held.bound_s))
        except ClientGoneError:
            self.ended(endpoint, "disconnected")
            return Response(status_code=CLIENT_GONE_STATUS)
        self.ended(endpoint, "bound" if result is None else "outcome")
        if result is None:
            rid = held.queued.request_id
            return answers.wait_exceeded(rid, held.bound_s, results_hint(rid)).response(held.headers)
        return result

    def ended(self, endpoint: str, how: str) -> None:
        """One wait of `endpoint` ended (`how`: outcome, bound, disconnected, error)."""
        if self._delivery is not None:
            self._delivery.ended(endpoint, how)
