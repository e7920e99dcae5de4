"""The webhook sender: drains the outbox in the results service, one task, a bounded number of
deliveries in flight, shared fairly across tenants (`fair_share`: each tenant at most its
`webhooks_in_flight` at once, free slots round-robin across tenants with deliveries due).

Each due row (`fair_share.due_fairly`) is attempted: the tenant's rules again
(`policy.CallbackPolicy.allowed`: the record may have come straight from Kafka, and the tenants
file may have changed), then the signed POST through the SSRF guard (`delivery.WebhookPoster`).
Then:

- delivered (2xx) or gone (410): the row is deleted;
- refused (a rule, the guard): a dead letter, then the row is deleted;
- anything else: the row is rescheduled by `backoff.Backoff` (attempts + 1, the error kept), or,
  past the retry period, dead-lettered and deleted. That includes a lookup of the callback's host
  refused because the tenant's `dns_lookups` are in flight (`resolver`), or one that did not
  answer in time.

A row queued as refused (its tenant's `webhooks_queued` was reached when its result was stored)
is dead-lettered with that reason, never sent; these take no tenant's slot (a dead letter is one
produce), at most `MAX_DEAD_LETTERING` at once.

A row is deleted only after its delivery is over and, for a dead letter, after the broker
acknowledged it; a crash before that means the attempt is made again after the restart, with the
same delivery id (at least once: receivers deduplicate by ``webhook-id``). The sender is woken
when a result with a callback is stored, and otherwise reads the outbox every `poll_interval_s`.

With results replicas every replica holds every row; an `owner` (`PartitionOwner`) says which reply
partitions' rows this replica sends, is told when a delivery ended (so it can move the partition's
done watermark on), and, when partitions move to another replica, `drain` lets the deliveries in
flight there finish (bounded) before the successor starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Collection
from typing import Protocol, TypeVar

from inferq.clock import wall_ms
from inferq.messaging.dead_letters import (
    ERROR_HEADER,
    KIND_HEADER,
    REQUEST_ID_HEADER,
    TENANT_HEADER,
    DeadLetters,
    Headers,
)
from inferq.messaging.reply_positions import ReplyPartition
from inferq.supervised import SupervisedTask
from inferq.tenancy.held import HeldLimits
from inferq.tenancy.model import OPEN_TENANT, Tenant
from inferq.webhooks.backoff import Backoff
from inferq.webhooks.delivery import AttemptOutcome, AttemptResult, WebhookPoster
from inferq.webhooks.errors import CallbackRefusedError
from inferq.webhooks.fair_share import SlotState, due_fairly
from inferq.webhooks.metrics import WebhookMetrics
from inferq.webhooks.outbox import PendingDelivery, WebhookOutbox
from inferq.webhooks.policy import CallbackPolicy
from inferq.webhooks.resolver import LookupOwner, looking_up_for

log = logging.getLogger("inferq.webhooks")

_T = TypeVar("_T")
DEAD_LETTER_KIND = b"webhook"
DELIVERY_ID_HEADER = "inferq.webhook.delivery_id"
ATTEMPTS_HEADER = "inferq.webhook.attempts"
TARGET_HEADER = "inferq.webhook.target"
STOP_TIMEOUT_S = 10.0
_Rows = list[PendingDelivery]
# Rows queued as refused being dead-lettered at once (besides the deliveries' slots).
MAX_DEAD_LETTERING = 16


class OutboxStore(Protocol):
    """Where the outbox lives (`inferq.results.store.ResultStore`)."""

    async def on_connection(self, call: Callable[[sqlite3.Connection], _T]) -> _T: ...


class TenantLookup(Protocol):
    """Whose rules apply (`inferq.tenancy.registry.TenantRegistry`)."""

    @property
    def open_mode(self) -> bool: ...

    def tenant(self, name: str) -> Tenant | None: ...


def limits_of(tenants: TenantLookup, name: str) -> HeldLimits:
    """The limits that apply to `name`'s deliveries: its own, open mode's tenant's, or (a tenant the
    file does not list: its deliveries are refused at delivery) the defaults."""
    if tenants.open_mode:
        return OPEN_TENANT.limits
    tenant = tenants.tenant(name)
    return tenant.limits if tenant is not None else HeldLimits()


class PartitionOwner(Protocol):
    """Which reply partitions' deliveries this replica sends (`inferq.results.ownership`)."""

    def owned(self) -> Collection[ReplyPartition]:
        """The partitions whose deliveries are this replica's now."""

    def delivery_ended(self) -> None:
        """A delivery is over and its row deleted: the done watermark may move on."""


class WebhookSender:
    def __init__(
        self,
        store: OutboxStore,
        outbox: WebhookOutbox,
        policy: CallbackPolicy,
        poster: WebhookPoster,
        dead_letters: DeadLetters,
        tenants: TenantLookup,
        backoff: Backoff,
        metrics: WebhookMetrics,
        *,
        max_in_flight: int = 16,
        poll_interval_s: float = 1.0,
        clock_ms: Callable[[], int] = wall_ms,
        uniform: Callable[[float, float], float] = random.uniform,
        owner: PartitionOwner | None = None,
    ) -> None:
        self._store = store
        self._outbox = outbox
        self._policy = policy
        self._poster = poster
        self._dead_letters = dead_letters
        self._tenants = tenants
        self._backoff = backoff
        self._metrics = metrics
        self._max_in_flight = max_in_flight
        self._poll_interval_s = poll_interval_s
        self._clock_ms = clock_ms
        self._uniform = uniform
        self._owner = owner
        # Every task in flight (deliveries and dead-lettered refusals), by delivery id.
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        # The deliveries among them (each holds a slot), with their tenant; per tenant, how many.
        self._sending_for: dict[str, str] = {}
        self._sending: Counter[str] = Counter()
        metrics.in_flight = self._sending
        # The tenant served last: the next pass's round starts after it.
        self._served_last: str | None = None
        self._pending_read_ms: int | None = None
        # The partition of each delivery in flight that has a source: what `drain` waits for.
        self._in_flight_at: dict[str, ReplyPartition] = {}
        self._wake = asyncio.Event()
        self._task = SupervisedTask(
            "webhook-sender",
            ended="webhook sender stopped; /healthz answers 503",
            stop_timeout_s=STOP_TIMEOUT_S,
            log=log,
        )

    @property
    def failed(self) -> bool:
        """Whether the sending task ended by itself (an error it could not go on after)."""
        return self._task.failed

    async def start(self) -> None:
        if self._task.started:
            return
        loop = asyncio.get_running_loop()

        def wake_from_worker() -> None:
            # Called on the store's worker thread when a delivery is queued.
            loop.call_soon_threadsafe(self._wake.set)

        self._outbox.on_enqueued = wake_from_worker
        self._task.start(self._run())

    async def stop(self) -> None:
        """Stop taking deliveries and cancel those in flight: their rows stay, to be sent again."""
        self._outbox.on_enqueued = lambda: None
        await self._task.stop()
        in_flight = list(self._in_flight.values())
        for running in in_flight:
            running.cancel()
        if in_flight:
            await asyncio.wait(in_flight, timeout=STOP_TIMEOUT_S)

    def wake(self) -> None:
        """Read the outbox now (partitions were just taken over)."""
        self._wake.set()

    async def drain(self, partitions: Collection[ReplyPartition], *, timeout_s: float) -> int:
        """Wait up to `timeout_s` for the deliveries in flight from `partitions` (no longer owned:
        none starts there any more), then cancel those left (their rows stay, for the successor);
        returns how many were cancelled."""
        moving = set(partitions)
        running = [
            task
            for delivery_id, task in self._in_flight.items()
            if self._in_flight_at.get(delivery_id) in moving
        ]
        if not running:
            return 0
        _, left = await asyncio.wait(running, timeout=timeout_s)
        for task in left:
            task.cancel()
        if left:
            await asyncio.wait(left, timeout=STOP_TIMEOUT_S)
        return len(left)

    async def _run(self) -> None:
        while True:
            # Cleared before the read: a row queued during it wakes the next wait at once.
            self._wake.clear()
            await self.send_due()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_interval_s)

    async def send_due(self) -> int:
        """Start the deliveries due now, as many as there are free slots, shared fairly across
        tenants (`fair_share`), and the dead letters of rows queued as refused; returns how many
        tasks started."""
        slots = SlotState(
            free=self._max_in_flight - len(self._sending_for),
            busy=dict(self._sending),
            exclude=frozenset(self._in_flight),
            after=self._served_last,
        )
        refusals = MAX_DEAD_LETTERING - (len(self._in_flight) - len(self._sending_for))
        if slots.free <= 0 and refusals <= 0:
            return 0
        now_ms = self._clock_ms()
        owned = frozenset(self._owner.owned()) if self._owner is not None else None

        # The gauge's count reads every row: at most once per poll interval, not on every pass.
        count_pending = (
            self._pending_read_ms is None or now_ms - self._pending_read_ms >= self._poll_interval_s * 1000
        )

        def read(db: sqlite3.Connection) -> tuple[_Rows, str | None, _Rows, int | None]:
            due, last = due_fairly(self._outbox, db, slots, now_ms=now_ms, room_of=self._room_of, owned=owned)
            refused = (
                self._outbox.refused_rows(db, limit=refusals, exclude=slots.exclude, owned=owned)
                if refusals > 0
                else []
            )
            return due, last, refused, self._outbox.pending(db, owned) if count_pending else None

        due, self._served_last, refused, pending = await self._store.on_connection(read)
        if pending is not None:
            self._metrics.pending, self._pending_read_ms = pending, now_ms
        started = 0
        for delivery in [*refused, *due]:
            if self._owner is not None and delivery.source is not None:
                # Read before the partition moved away (the read ran on the worker): not ours now.
                if delivery.source.where not in self._owner.owned():
                    continue
                self._in_flight_at[delivery.delivery_id] = delivery.source.where
            if delivery.refused is None:
                self._sending_for[delivery.delivery_id] = delivery.tenant
                self._sending[delivery.tenant] += 1
            task = asyncio.create_task(self._deliver(delivery), name=f"webhook-{delivery.delivery_id}")
            self._in_flight[delivery.delivery_id] = task
            task.add_done_callback(functools.partial(self._finished, delivery.delivery_id))
            started += 1
        return started

    def _room_of(self, tenant: str) -> int:
        """How many of `tenant`'s deliveries may be in flight at once (read on the worker thread:
        the tenants in force are an immutable snapshot)."""
        return limits_of(self._tenants, tenant).webhooks_in_flight

    def _finished(self, delivery_id: str, task: asyncio.Task[None]) -> None:
        self._in_flight.pop(delivery_id, None)
        self._in_flight_at.pop(delivery_id, None)
        tenant = self._sending_for.pop(delivery_id, None)
        if tenant is not None:
            self._sending[tenant] -= 1
            if self._sending[tenant] <= 0:
                del self._sending[tenant]
        self._wake.set()  # a slot is free
        if not task.cancelled() and task.exception() is not None:
            log.error("webhook delivery %s failed unexpectedly", delivery_id, exc_info=task.exception())

    async def _deliver(self, delivery: PendingDelivery) -> None:
        if delivery.refused is not None:
            self._metrics.refusals.count(delivery.tenant, "queue_full")
            await self._give_up(delivery, "queue_full", delivery.refused, None)
            return
        attempt = delivery.attempts + 1
        try:
            target, secret = self._policy.allowed(
                delivery.callback_url,
                self._tenants.tenant(delivery.tenant),
                open_mode=self._tenants.open_mode,
            )
        except CallbackRefusedError as exc:
            self._metrics.attempt("refused")
            await self._give_up(delivery, "refused", f"callback refused at delivery: {exc.problem}", None)
            return
        # The host's lookup (inside the post, by aiohttp's resolver) counts under the tenant's dns_lookups.
        owner = LookupOwner(delivery.tenant, limits_of(self._tenants, delivery.tenant).dns_lookups)
        with looking_up_for(owner):
            result = await self._poster.post(
                target, delivery, secret=secret, attempt=attempt, now_s=self._clock_ms() // 1000
            )
        self._metrics.attempt(result.kind)
        if result.outcome is AttemptOutcome.DELIVERED:
            await self._remove(delivery)
            self._metrics.delivered((self._clock_ms() - delivery.stored_at_ms) / 1000)
            log.info(
                "webhook %s of request %s delivered to %s (attempt %d)",
                delivery.delivery_id,
                delivery.request_id,
                target.origin,
                attempt,
            )
        elif result.outcome is AttemptOutcome.GONE:
            await self._remove(delivery)
            self._metrics.ended("gone")
            log.info("webhook %s: %s answered 410 Gone, not retried", delivery.delivery_id, target.origin)
        elif result.outcome is AttemptOutcome.REFUSED:
            await self._give_up(
                delivery, "refused", f"callback refused at delivery: {result.detail}", target.origin
            )
        else:
            await self._retry_or_give_up(delivery, attempt, result, target.origin)

    async def _retry_or_give_up(
        self, delivery: PendingDelivery, attempt: int, result: AttemptResult, origin: str
    ) -> None:
        now_ms = self._clock_ms()
        next_ms = self._backoff.next_attempt_ms(
            attempt, now_ms=now_ms, first_stored_ms=delivery.stored_at_ms, uniform=self._uniform
        )
        if next_ms is None:
            reason = f"not delivered within the retry period after {attempt} attempts; last: {result.detail}"
            await self._give_up(delivery, "expired", reason, origin, attempts=attempt)
            return
        await self._store.on_connection(
            lambda db: self._outbox.reschedule(
                db, delivery.delivery_id, attempts=attempt, next_attempt_at_ms=next_ms, error=result.detail
            )
        )
        log.warning(
            "webhook %s to %s failed (%s), attempt %d; next in %.1f s",
            delivery.delivery_id,
            origin,
            result.detail,
            attempt,
            (next_ms - now_ms) / 1000,
        )

    async def _give_up(
        self,
        delivery: PendingDelivery,
        outcome: str,
        reason: str,
        origin: str | None,
        *,
        attempts: int | None = None,
    ) -> None:
        """A dead letter (the body, the reason and the delivery in headers), then the row goes."""
        headers: Headers = [
            (ERROR_HEADER, reason.encode()),
            (KIND_HEADER, DEAD_LETTER_KIND),
            (REQUEST_ID_HEADER, delivery.request_id.encode()),
            (TENANT_HEADER, delivery.tenant.encode()),
            (DELIVERY_ID_HEADER, delivery.delivery_id.encode()),
            (ATTEMPTS_HEADER, str(attempts if attempts is not None else delivery.attempts).encode()),
        ]
        if origin is not None:
            headers.append((TARGET_HEADER, origin.encode()))
        await self._dead_letters.write(delivery.body, key=delivery.request_id.encode(), headers=headers)
        await self._remove(delivery)
        self._metrics.ended(outcome)
        log.warning(
            "webhook %s of request %s dead-lettered: %s", delivery.delivery_id, delivery.request_id, reason
        )

    async def _remove(self, delivery: PendingDelivery) -> None:
        await self._store.on_connection(lambda db: self._outbox.remove(db, delivery.delivery_id))
        if self._owner is not None:
            self._owner.delivery_ended()
