"""The sender's slots shared fairly across tenants, and each tenant's queue bounded, on a real
results database with scripted receivers: a tenant whose receiver never answers holds at most its
`webhooks_in_flight` slots while another tenant's deliveries go on; free slots go round-robin, so
a tenant with many due rows does not starve one with a single row; a delivery past the tenant's
`webhooks_queued` is dead-lettered with the reason, its result still stored."""

from __future__ import annotations

import asyncio
import dataclasses
import json

from pydantic import SecretStr

from inferq.tenancy.held import HeldLimits
from inferq.tenancy.model import Entitlements, NameSet, Tenant, TenantDirectory
from inferq.webhooks.delivery import AttemptResult
from inferq.webhooks.fair_share import SlotState, due_fairly, pick_round_robin
from tests.support.fakes import labels
from tests.support.loop import in_loop
from tests.support.waiting import eventually
from tests.unit.test_webhook_outbox import FAIL, SECRET, Receiver, Rig, Tenants, hooked


def tenant(name: str, **limits: int) -> Tenant:
    return Tenant(
        name=name,
        key_digests=(),
        weight=1.0,
        entitlements=dataclasses.replace(
            Entitlements.unrestricted(), callback_hosts=NameSet.of(["hooks.example"])
        ),
        webhook_secrets=(SecretStr(SECRET),),
        limits=HeldLimits(**limits),
    )


class TarpitFor(Receiver):
    """Answers at once, except for `tarpit`'s deliveries: those wait until `released` (a receiver
    that accepts and never answers, cut only by the attempt's bound). Records each call's tenant."""

    def __init__(self, tarpit: str, *answers: AttemptResult) -> None:
        super().__init__(*answers)
        self.tarpit = tarpit
        self.released = asyncio.Event()
        self.tenants: list[str] = []
        self.holding = 0

    async def post(self, target, delivery, *, secret, attempt, now_s) -> AttemptResult:
        self.tenants.append(delivery.tenant)
        if delivery.tenant == self.tarpit:
            self.holding += 1
            try:
                await self.released.wait()
            finally:
                self.holding -= 1
        return await super().post(target, delivery, secret=secret, attempt=attempt, now_s=now_s)


def request_ids(receiver: Receiver) -> list[str]:
    return [json.loads(call["body"])["request_id"] for call in receiver.calls]


# --- the decision --------------------------------------------------------------------------------


def test_round_robin_takes_one_per_tenant_per_round_in_rotation_order():
    candidates = [("a", ["a1", "a2", "a3"]), ("b", ["b1"]), ("c", ["c1", "c2"])]
    assert pick_round_robin(candidates, 4) == (["a1", "b1", "c1", "a2"], "a")
    assert pick_round_robin(candidates, 10) == (["a1", "b1", "c1", "a2", "c2", "a3"], "a")
    assert pick_round_robin(candidates, 2) == (["a1", "b1"], "b")
    assert pick_round_robin([], 5) == ([], None)
    assert pick_round_robin(candidates, 0) == ([], None)


# --- the sender ----------------------------------------------------------------------------------


@in_loop
async def test_a_tarpit_receiver_holds_only_its_tenants_share_and_the_other_tenant_is_delivered(tmp_path):
    directory = TenantDirectory([tenant("slowpoke", webhooks_in_flight=2), tenant("brisk")])
    receiver = TarpitFor("slowpoke")
    rig = Rig(tmp_path, receiver, tenants=Tenants(directory), max_in_flight=4)
    async with rig.store:
        # 30 of slowpoke's due before brisk's one: the longest-due-first order would give them every slot.
        await rig.store.put_many([hooked(f"slow-{i}", tenant="slowpoke") for i in range(30)])
        rig.now_ms += 1_000
        await rig.store.put_many([hooked("brisk-1", tenant="brisk")])
        await rig.sender.send_due()
        await eventually(lambda: "brisk-1" in request_ids(receiver), "brisk delivered", 5, interval_s=0.001)
        await eventually(lambda: receiver.holding == 2, "slowpoke's two held", 5, interval_s=0.001)
        # More passes start none of slowpoke's: its share is held, though two slots are free.
        await rig.sender.send_due()
        await rig.sender.send_due()
        assert receiver.holding == 2 and receiver.tenants.count("slowpoke") == 2
        gauge = rig.metrics.points("inferq_webhook_in_flight")
        assert gauge[labels(tenant="slowpoke")] == 2 and gauge.get(labels(tenant="brisk"), 0) == 0
        # More of brisk's arrive while the tarpit holds: every one is delivered.
        await rig.store.put_many([hooked(f"brisk-{i}", tenant="brisk") for i in range(2, 12)])
        for _ in range(10):
            await rig.sender.send_due()
            await asyncio.sleep(0)
        await eventually(
            lambda: sum(r.startswith("brisk") for r in request_ids(receiver)) == 11,
            "brisk's eleven delivered",
            5,
            interval_s=0.001,
        )
        assert receiver.holding == 2
        receiver.released.set()
        await rig.sender.stop()


@in_loop
async def test_free_slots_go_round_robin_so_a_tenant_with_many_rows_does_not_starve_one_with_few(tmp_path):
    directory = TenantDirectory([tenant("flood"), tenant("one"), tenant("two")])
    receiver = TarpitFor("nobody")
    rig = Rig(tmp_path, receiver, tenants=Tenants(directory), max_in_flight=1)
    async with rig.store:
        await rig.store.put_many([hooked(f"flood-{i}", tenant="flood") for i in range(20)])
        rig.now_ms += 1_000
        await rig.store.put_many([hooked("one-1", tenant="one"), hooked("two-1", tenant="two")])
        await rig.store.put_many([hooked("two-2", tenant="two")])
        for _ in range(7):
            await rig.run_due()
    # One slot: each pass serves the tenant after the one served last.
    assert receiver.tenants == ["flood", "one", "two", "flood", "two", "flood", "flood"]


@in_loop
async def test_a_delivery_past_the_tenants_queue_bound_is_dead_lettered_with_the_reason(tmp_path):
    directory = TenantDirectory([tenant("acme", webhooks_queued=2), tenant("beta", webhooks_queued=2)])
    tenants = Tenants(directory)
    limit = {"acme": 2, "beta": 2}
    rig = Rig(tmp_path, Receiver(FAIL), tenants=tenants, queue_limit=limit.__getitem__)
    async with rig.store:
        await rig.store.put_many([hooked(f"a{i}", tenant="acme") for i in range(3)])
        await rig.store.put_many([hooked("b0", tenant="beta")])
        # Every result is stored and readable, the third of acme's included.
        for request_id, name in [("a0", "acme"), ("a1", "acme"), ("a2", "acme"), ("b0", "beta")]:
            stored = await rig.store.get(name, request_id)
            assert stored is not None and stored.request_id == request_id
        await rig.run_due()
        # a2 was never sent: dead-lettered, with the reason; acme's two and beta's one were tried.
        assert sorted(request_ids(rig.receiver)) == ["a0", "a1", "b0"]
        [(_topic, body, key, headers)] = rig.dlq.sent
        assert key == b"a2" and json.loads(body)["request_id"] == "a2"
        assert headers["inferq.error"] == b"webhook queue of tenant acme is full (webhooks_queued=2)"
        assert headers["inferq.tenant"] == b"acme"
        assert rig.metrics.points("inferq_webhook_refusals_total") == {
            labels(tenant="acme", reason="queue_full"): 1
        }
        assert rig.metrics.points("inferq_webhook_deliveries_total")[labels(outcome="queue_full")] == 1
        # Still full (the two failing ones are owed): the next one is refused too; beta's are not.
        await rig.store.put_many([hooked("a3", tenant="acme"), hooked("b1", tenant="beta")])
        await rig.run_due()
        assert [h["inferq.request_id"] for _, _, _, h in rig.dlq.sent] == [b"a2", b"a3"]
        assert await rig.pending() == 4


@in_loop
async def test_an_outbox_from_before_the_queue_bound_gets_its_column_and_keeps_its_rows(tmp_path):
    rig = Rig(tmp_path, Receiver())
    async with rig.store:
        await rig.store.put_many([hooked("old")])
        # As a database written before the bound: no `refused` column, nor its indexes.
        await rig.store.on_connection(
            lambda db: [
                db.execute(sql)
                for sql in (
                    "DROP INDEX webhook_outbox_tenant_due",
                    "DROP INDEX webhook_outbox_refused",
                    "ALTER TABLE webhook_outbox DROP COLUMN refused",
                )
            ]
        )
    again = Rig(tmp_path, Receiver(), queue_limit=lambda tenant: 1)
    async with again.store:
        await again.store.put_many([hooked("new")])  # past the bound of 1: the old row is owed
        await again.run_due()
        assert request_ids(again.receiver) == ["old"]
        [(_topic, _body, key, _headers)] = again.dlq.sent
        assert key == b"new"


@in_loop
async def test_a_pass_looks_at_a_bounded_number_of_tenants_and_the_next_goes_on_from_there(tmp_path):
    directory = TenantDirectory([tenant(f"t{i}") for i in range(5)])
    rig = Rig(tmp_path, Receiver(), tenants=Tenants(directory))
    async with rig.store:
        await rig.store.put_many([hooked(f"r{i}", tenant=f"t{i}") for i in range(5)])
        # t0 and t1 are in backoff: a pass that looks at two tenants finds nothing due there.
        for name in ("r0", "r1"):
            await rig.store.on_connection(
                lambda db, n=name: db.execute(
                    "UPDATE webhook_outbox SET next_attempt_at_ms = ? WHERE request_id = ?", (2**62, n)
                )
            )
        passes = []
        after = None
        for _ in range(3):
            slots = SlotState(free=16, busy={}, exclude=frozenset(), after=after)
            picked, after = await rig.store.on_connection(
                lambda db, s=slots: due_fairly(
                    rig.outbox, db, s, now_ms=rig.now_ms, room_of=lambda t: 4, owned=None, max_tenants=2
                )
            )
            passes.append([d.tenant for d in picked])
    assert passes == [[], ["t2", "t3"], ["t4"]]
