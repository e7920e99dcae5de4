"""The webhook outbox and its sender, on a real results database with a scripted receiver: a result
with a callback is delivered once, retried with the same delivery id, dead-lettered when the period
runs out or a rule refuses it at delivery, and nothing is lost across a restart."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from inferq.messaging.dead_letters import DeadLetters, DurableProducer
from inferq.messaging.records import InferenceResult
from inferq.results.store import ResultStore
from inferq.results.webhooks import result_body
from inferq.tenancy.model import Entitlements, NameSet, Tenant, TenantDirectory
from inferq.tenancy.secret_forms import webhook_key
from inferq.webhooks.backoff import Backoff
from inferq.webhooks.delivery import AttemptOutcome, AttemptResult
from inferq.webhooks.guard import AddressGuard
from inferq.webhooks.metrics import WebhookMetrics
from inferq.webhooks.outbox import WebhookOutbox
from inferq.webhooks.policy import CallbackPolicy
from inferq.webhooks.sender import WebhookSender
from inferq.webhooks.settings import WebhookSettings
from tests.support.fakes import InMemoryMetrics, a_result, labels
from tests.support.loop import in_loop
from tests.support.waiting import eventually

SECRET = "whsec_b3V0Ym94LXVuaXQtLS0tLS0tLS0tLS0tLS0tLS0tLS0="  # noqa: S105 - a test secret
URL = "https://hooks.example/inferq"


def hooked(request_id: str, url: str | None = URL, tenant: str = "default") -> InferenceResult:
    return dataclasses.replace(a_result(request_id), callback_url=url, tenant=tenant)


class Receiver:
    """The poster, scripted: one answer per attempt (the last one repeats); records every call."""

    def __init__(self, *answers: AttemptResult) -> None:
        self.answers = list(answers) or [AttemptResult(AttemptOutcome.DELIVERED, "HTTP 200", "2xx")]
        self.calls: list[dict[str, Any]] = []

    async def post(self, target, delivery, *, secret, attempt, now_s) -> AttemptResult:
        self.calls.append(
            {
                "url": target.url,
                "id": delivery.delivery_id,
                "body": delivery.body,
                "attempt": attempt,
                "secret": secret,
                "now_s": now_s,
            }
        )
        return self.answers[min(len(self.calls), len(self.answers)) - 1]


class DlqProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None, dict[str, bytes]]] = []

    async def produce(self, topic, value, *, key=None, headers=None) -> None:
        self.sent.append((topic, value, key, {k: v for k, v in headers or []}))


class Tenants:
    def __init__(self, directory: TenantDirectory | None) -> None:
        self.directory = directory

    @property
    def open_mode(self) -> bool:
        return self.directory is None

    def tenant(self, name: str) -> Tenant | None:
        return None if self.directory is None else self.directory.get(name)


FAIL = AttemptResult(AttemptOutcome.RETRY, "HTTP 503", "5xx")


class Rig:
    def __init__(
        self,
        tmp_path: Path,
        receiver: Receiver,
        *,
        tenants: Tenants | None = None,
        retry_period_s: float = 60.0,
        max_in_flight: int = 16,
        queue_limit: Callable[[str], int] | None = None,
    ) -> None:
        self.now_ms = 1_000_000
        self.outbox = WebhookOutbox(result_body, queue_limit=queue_limit)
        self.store = ResultStore(tmp_path / "r.db", hooks=[self.outbox], clock_ms=lambda: self.now_ms)
        self.receiver = receiver
        self.dlq = DlqProducer()
        self.metrics = InMemoryMetrics()
        settings = WebhookSettings(callback_hosts=("hooks.example",), secret=SECRET)
        guard = AddressGuard(allow_private=True)
        self.sender = WebhookSender(
            self.store,
            self.outbox,
            CallbackPolicy(settings, guard),
            receiver,  # type: ignore[arg-type]
            DeadLetters(DurableProducer(self.dlq), "p.dlq"),
            tenants or Tenants(None),
            Backoff(first_backoff_s=1.0, max_backoff_s=4.0, retry_period_s=retry_period_s),
            WebhookMetrics(self.metrics.meter),
            clock_ms=lambda: self.now_ms,
            uniform=lambda low, high: high,
            max_in_flight=max_in_flight,
        )

    async def pending(self) -> int:
        return await self.store.on_connection(self.outbox.pending)

    async def run_due(self) -> None:
        """Start what is due and wait for it (bounded)."""
        await self.sender.send_due()
        await eventually(lambda: not self.sender._in_flight, "the due sends done", 5, interval_s=0.001)


@in_loop
async def test_a_result_with_a_callback_is_queued_in_its_own_transaction_and_only_once(tmp_path):
    rig = Rig(tmp_path, Receiver())
    async with rig.store:
        assert await rig.store.put_many([hooked("a"), hooked("b", url=None)]) == (2, 0)
        assert await rig.pending() == 1
        # The same result again (a redelivered record): dropped, and no second delivery.
        assert await rig.store.put_many([hooked("a")]) == (0, 1)
        assert await rig.pending() == 1


@in_loop
async def test_a_failed_batch_queues_no_delivery(tmp_path):
    rig = Rig(tmp_path, Receiver())

    def body_that_breaks(result: InferenceResult) -> bytes:
        raise RuntimeError("disk full")

    rig.outbox._body_of = body_that_breaks
    async with rig.store:
        with pytest.raises(RuntimeError):
            await rig.store.put_many([hooked("a")])
        assert await rig.store.get("default", "a") is None  # the result rolled back with it
        assert await rig.pending() == 0


@in_loop
async def test_delivered_once_with_a_valid_signature_over_the_public_view(tmp_path):
    rig = Rig(tmp_path, Receiver())
    async with rig.store:
        await rig.store.put_many([hooked("a")])
        await rig.run_due()
        await rig.run_due()  # nothing left
        [call] = rig.receiver.calls
        assert call["url"] == URL and call["attempt"] == 1
        assert json.loads(call["body"])["request_id"] == "a"
        assert json.loads(call["body"])["status"] == "OK"
        assert "callback_url" not in json.loads(call["body"])
        assert call["secret"].keys == (webhook_key(SECRET),)  # open mode: INFERQ_WEBHOOK_SECRET
        assert await rig.pending() == 0
        assert rig.dlq.sent == []
        assert rig.metrics.points("inferq_webhook_deliveries_total")[labels(outcome="delivered")] == 1


@in_loop
async def test_a_failing_receiver_gets_it_again_later_with_the_same_delivery_id(tmp_path):
    rig = Rig(tmp_path, Receiver(FAIL, FAIL, AttemptResult(AttemptOutcome.DELIVERED, "HTTP 204", "2xx")))
    async with rig.store:
        await rig.store.put_many([hooked("a")])
        await rig.run_due()
        await rig.run_due()  # not due yet: the backoff holds it
        assert len(rig.receiver.calls) == 1
        assert rig.metrics.points("inferq_webhook_outbox_pending") == {labels(): 1}
        rig.now_ms += 1_000  # first backoff (the jitter at its highest)
        await rig.run_due()
        rig.now_ms += 2_000
        await rig.run_due()
        calls = rig.receiver.calls
        assert [c["attempt"] for c in calls] == [1, 2, 3]
        assert len({c["id"] for c in calls}) == 1
        assert len({c["body"] for c in calls}) == 1
        assert await rig.pending() == 0
        assert rig.metrics.points("inferq_webhook_attempts_total")[labels(result="5xx")] == 2


@in_loop
async def test_an_always_failing_receiver_yields_one_dead_letter_after_the_retry_period(tmp_path):
    rig = Rig(tmp_path, Receiver(FAIL), retry_period_s=10)
    async with rig.store:
        await rig.store.put_many([hooked("a")])
        for _ in range(20):
            await rig.run_due()
            rig.now_ms += 4_000
        assert 3 <= len(rig.receiver.calls) <= 5
        [(topic, value, key, headers)] = rig.dlq.sent
        assert (topic, key) == ("p.dlq", b"a")
        assert json.loads(value)["request_id"] == "a"
        assert headers["inferq.dead_letter.kind"] == b"webhook"
        assert b"retry period" in headers["inferq.error"] and b"HTTP 503" in headers["inferq.error"]
        assert headers["inferq.webhook.delivery_id"] == rig.receiver.calls[0]["id"].encode()
        assert headers["inferq.webhook.target"] == b"https://hooks.example:443"
        assert SECRET.encode() not in b"".join(headers.values())
        assert await rig.pending() == 0


@in_loop
async def test_410_stops_without_a_dead_letter(tmp_path):
    rig = Rig(tmp_path, Receiver(AttemptResult(AttemptOutcome.GONE, "HTTP 410 Gone", "4xx")))
    async with rig.store:
        await rig.store.put_many([hooked("a")])
        for _ in range(3):
            await rig.run_due()
            rig.now_ms += 10_000
        assert len(rig.receiver.calls) == 1 and rig.dlq.sent == []
        assert await rig.pending() == 0


def tenant(name: str, hosts: list[str], secret: str | None = SECRET) -> Tenant:
    from pydantic import SecretStr

    return Tenant(
        name=name,
        key_digests=(),
        weight=1.0,
        entitlements=dataclasses.replace(Entitlements.unrestricted(), callback_hosts=NameSet.of(hosts)),
        webhook_secrets=(SecretStr(secret),) if secret else (),
    )


@pytest.mark.parametrize(
    ("result", "why"),
    [
        (hooked("a", tenant="acme", url="https://evil.example/x"), b"not among this tenant's callback_hosts"),
        (hooked("a", tenant="gone"), b"not in the tenants file"),
        (hooked("a", tenant="nosecret"), b"no webhook secret"),
        (hooked("a", tenant="acme", url="http://hooks.example/x"), b"scheme must be https"),
        (hooked("a", tenant="acme", url="https://2130706433/x"), b"non-canonical"),
    ],
)
@in_loop
async def test_a_record_from_kafka_gets_no_more_than_ingest_would_allow(tmp_path, result, why):
    directory = TenantDirectory(
        [tenant("acme", ["hooks.example"]), tenant("nosecret", ["hooks.example"], None)]
    )
    rig = Rig(tmp_path, Receiver(), tenants=Tenants(directory))
    async with rig.store:
        await rig.store.put_many([result])
        await rig.run_due()
        assert rig.receiver.calls == []
        [(_, _, _, headers)] = rig.dlq.sent
        assert why in headers["inferq.error"]
        assert rig.metrics.points("inferq_webhook_deliveries_total")[labels(outcome="refused")] == 1


@in_loop
async def test_pending_deliveries_survive_a_restart(tmp_path):
    first = Rig(tmp_path, Receiver(FAIL))
    async with first.store:
        await first.store.put_many([hooked("a"), hooked("b")])
        await first.run_due()
    assert len(first.receiver.calls) == 2
    ids = {c["id"] for c in first.receiver.calls}
    second = Rig(tmp_path, Receiver())
    second.now_ms += 5_000
    async with second.store:
        assert await second.pending() == 2
        await second.run_due()
        assert {c["id"] for c in second.receiver.calls} == ids
        assert {c["attempt"] for c in second.receiver.calls} == {2}
        assert await second.pending() == 0


@in_loop
async def test_the_sender_task_is_woken_by_a_stored_result_and_stops_cleanly(tmp_path):
    rig = Rig(tmp_path, Receiver())
    rig.sender._poll_interval_s = 3_600  # only the wake-up can make it send
    async with rig.store:
        await rig.sender.start()
        await rig.store.put_many([hooked("a")])
        async with asyncio.timeout(5):
            while not rig.receiver.calls or await rig.pending():
                await asyncio.sleep(0.01)
        await rig.sender.stop()
        assert not rig.sender.failed
