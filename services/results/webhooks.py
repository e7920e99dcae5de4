"""The results service's webhook delivery, composed: the outbox (a hook of the results table, so a
delivery is queued in the same transaction as its result), the dead-letter producer, the poster
and the sender (`inferq.webhooks`). `app.bootstrap` builds one and its lifespan starts it before the consumer.

The body POSTed is the result as ``GET /v1/requests/{id}`` shows it (`view.public_view`), frozen
when the result is stored. The Kafka producer (dead letters only) starts on its first dead letter:
most processes never write one, and need no idle connection for it.
"""

from __future__ import annotations

import json
from typing import Protocol

from inferq.messaging.dead_letters import DeadLetters, DurableProducer, Headers, RecordProducer
from inferq.messaging.records import InferenceResult
from inferq.results.ownership import WebhookOwnership
from inferq.results.settings import ResultsSettings
from inferq.results.store import ResultStore
from inferq.results.view import public_view
from inferq.telemetry import meter
from inferq.webhooks.backoff import Backoff
from inferq.webhooks.delivery import WebhookPoster
from inferq.webhooks.guard import AddressGuard
from inferq.webhooks.metrics import WebhookMetrics
from inferq.webhooks.outbox import WebhookOutbox
from inferq.webhooks.policy import CallbackPolicy
from inferq.webhooks.resolver import CallbackResolver
from inferq.webhooks.sender import TenantLookup, WebhookSender


class LabelledTenants(TenantLookup, Protocol):
    """The tenants in force, and each one's metrics label (`inferq.tenancy.registry.TenantRegistry`)."""

    def label(self, tenant: str) -> str: ...


class StoppableProducer(RecordProducer, Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> object: ...


class _StartedOnFirstUse:
    """A producer started by its first `produce`, stopped only if it was started."""

    def __init__(self, producer: StoppableProducer) -> None:
        self._producer = producer
        self._started = False

    async def produce(
        self, topic: str, value: bytes, *, key: bytes | None = None, headers: Headers | None = None
    ) -> object:
        if not self._started:
            await self._producer.start()
            self._started = True
        return await self._producer.produce(topic, value, key=key, headers=headers)

    async def stop(self) -> None:
        if self._started:
            self._started = False
            await self._producer.stop()


def result_body(result: InferenceResult) -> bytes:
    """What a webhook POSTs: the result as ``GET /v1/requests/{id}`` answers it, as JSON."""
    return json.dumps(public_view(result), separators=(",", ":")).encode()


class ResultWebhooks:
    """The sender of the results `store`'s webhooks, queued in `outbox` (which the store was built
    with: `ResultStore(hooks=[outbox])`); dead letters go through `producer` (started on its first
    one). `start()` starts the sender, and with `replicated` this replica's membership of the
    results group, which says which reply partitions' deliveries it sends (`ownership`; without it,
    it sends every row: a test's single process). `stop()` gives the partitions up (in-flight
    deliveries drained, the watermark committed, the group left), then stops the sender
    (deliveries still in flight stay in the outbox)."""

    def __init__(
        self,
        settings: ResultsSettings,
        tenants: LabelledTenants,
        store: ResultStore,
        outbox: WebhookOutbox,
        *,
        producer: StoppableProducer,
        replicated: bool,
    ) -> None:
        hooks = settings.webhooks
        self.outbox = outbox
        self._producer = _StartedOnFirstUse(producer)
        dlq = self._dlq = settings.kafka.topics.dlq
        metrics = WebhookMetrics(meter("inferq.results"), label=tenants.label)
        # The callbacks' own resolver (`inferq.webhooks.resolver`): never the loop's default executor.
        self._resolver = CallbackResolver(threads=hooks.resolver_threads, on_refused=metrics.refusals.count)
        guard = AddressGuard(
            allow_private=hooks.allow_private_addresses,
            resolve_timeout_s=hooks.resolve_timeout_s,
            resolve=self._resolver,
        )
        self._poster = WebhookPoster(
            guard, timeout_s=hooks.timeout_s, connect_timeout_s=hooks.connect_timeout_s
        )
        self.ownership = WebhookOwnership(settings, store, outbox) if replicated else None
        self.sender = WebhookSender(
            store,
            outbox,
            CallbackPolicy(hooks, guard),
            self._poster,
            DeadLetters(DurableProducer(self._producer, own_topics=[dlq]), dlq),
            tenants,
            Backoff(
                first_backoff_s=hooks.first_backoff_s,
                max_backoff_s=max(hooks.first_backoff_s, hooks.max_backoff_s),
                retry_period_s=hooks.retry_period_s,
            ),
            metrics,
            max_in_flight=hooks.max_in_flight,
            poll_interval_s=hooks.poll_interval_s,
            owner=self.ownership,
        )
        if self.ownership is not None:
            # The group asks the sender to finish a partition's deliveries before it moves.
            sender = self.sender
            self.ownership.on_release(
                lambda moving, timeout_s: sender.drain(moving, timeout_s=timeout_s), sender.wake
            )

    @property
    def failed(self) -> bool:
        return self.sender.failed or (self.ownership is not None and self.ownership.failed)

    @property
    def topics(self) -> list[str]:
        """The topics this writes to (the DLQ): the service checks they exist with its own."""
        return [self._dlq]

    async def start(self) -> None:
        """Start the sender on the store, then (replicated) join the results group."""
        await self._poster.start()
        await self.sender.start()
        if self.ownership is not None:
            await self.ownership.start()

    async def stop(self) -> None:
        if self.ownership is not None:
            await self.ownership.stop()
        await self.sender.stop()
        await self._poster.stop()
        self._resolver.close()
        await self._producer.stop()
