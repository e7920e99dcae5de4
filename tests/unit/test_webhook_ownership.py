"""Webhooks with results replicas, without a broker: every replica's outbox holds every delivery
under the same id; a replica sends only the partitions it owns; a partition's done watermark deletes
what its owner finished and keeps later reads from queueing it again; the watermark an owner commits
never passes a delivery still owed, nor moves back."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Collection

from inferq.messaging.records import InferenceResult
from inferq.messaging.reply_positions import ReplyPartition, ReplySource
from inferq.results.ownership import watermarks_to_commit
from inferq.results.store import ResultStore
from inferq.results.webhooks import result_body
from inferq.webhooks.outbox import WebhookOutbox, delivery_id_of
from tests.support.fakes import a_result
from tests.support.loop import in_loop
from tests.unit.test_webhook_outbox import FAIL, Receiver, Rig

URL = "https://hooks.example/inferq"
P0, P1 = ReplyPartition("r", 0), ReplyPartition("r", 1)


def hooked(request_id: str) -> InferenceResult:
    return dataclasses.replace(a_result(request_id), callback_url=URL)


async def store_from(store: ResultStore, *records: tuple[str, ReplyPartition, int]) -> None:
    """Results stored as a reader would: with the record each came from and the position after it."""
    for request_id, where, offset in records:
        await store.put_many(
            [hooked(request_id)],
            sources=[ReplySource(where.topic, where.partition, offset)],
            positions={where: offset + 1},
        )


class Owner:
    def __init__(self, *owned: ReplyPartition) -> None:
        self.partitions = set(owned)
        self.ended = 0

    def owned(self) -> Collection[ReplyPartition]:
        return self.partitions

    def delivery_ended(self) -> None:
        self.ended += 1


@in_loop
async def test_two_replicas_queue_the_same_delivery_under_the_same_id(tmp_path):
    ids = []
    for name in ("one", "two"):
        outbox = WebhookOutbox(result_body)
        async with ResultStore(tmp_path / f"{name}.db", hooks=[outbox]) as store:
            await store_from(store, ("a", P0, 0), ("b", P1, 0))
            rows = await store.on_connection(lambda db, o=outbox: o.due(db, now_ms=2**62, limit=10))
            ids.append(sorted(r.delivery_id for r in rows))
    one = ids[0]
    two = ids[1]
    assert one == two == sorted([delivery_id_of(hooked("a")), delivery_id_of(hooked("b"))])
    # Another completion of a request id used again is another delivery.
    assert delivery_id_of(hooked("a")) != delivery_id_of(dataclasses.replace(hooked("a"), completed_at_ms=31))


@in_loop
async def test_a_replica_sends_only_the_partitions_it_owns_and_tells_the_owner(tmp_path):
    rig = Rig(tmp_path, Receiver())
    owner = Owner(P1)
    rig.sender._owner = owner
    async with rig.store:
        await store_from(rig.store, ("a", P0, 0), ("b", P1, 0))
        # A row from before replicas (no source): its holder sends it.
        await rig.store.put_many([hooked("legacy")])
        await rig.run_due()
        requests = sorted(c["body"].split(b'"request_id":"')[1].split(b'"')[0] for c in rig.receiver.calls)
        left = await rig.store.on_connection(rig.outbox.pending)
        ended = owner.ended
    assert requests == [b"b", b"legacy"]
    assert left == 1, "P0's delivery waits for its owner"
    assert ended == 2


@in_loop
async def test_a_done_watermark_deletes_what_the_owner_finished_and_later_reads_queue_nothing_below_it(
    tmp_path,
):
    outbox = WebhookOutbox(result_body)
    async with ResultStore(tmp_path / "r.db", hooks=[outbox]) as store:
        await store_from(store, ("a", P0, 0), ("b", P0, 1))
        deleted = await store.on_connection(lambda db: outbox.mark_done_below(db, {P0: 2}))
        # This replica's reader lagged: records 2 and 3 arrive now; 2 was finished by the owner
        # (the watermark moved on meanwhile), 3 was not.
        await store.on_connection(lambda db: outbox.mark_done_below(db, {P0: 3}))
        await store_from(store, ("c", P0, 2), ("d", P0, 3))
        # A watermark read again, lower (an older commit): nothing moves back.
        await store.on_connection(lambda db: outbox.mark_done_below(db, {P0: 1}))
        await store_from(store, ("a-again", P0, 1))
        rows = await store.on_connection(lambda db: outbox.due(db, now_ms=2**62, limit=10))
        first = await store.on_connection(lambda db: outbox.first_pending(db, [P0, P1]))
        deleted, pending, first = (
            deleted,
            [r.request_id for r in rows],
            [f"{k.partition}:{v}" for k, v in first.items()],
        )
    assert deleted == 2
    assert pending == ["d"]
    assert first == ["0:3"]


def test_the_watermark_committed_is_the_first_delivery_owed_else_how_far_the_partition_is_stored():
    owned = [P0, P1, ReplyPartition("r", 2)]
    moved = watermarks_to_commit(
        owned,
        first_pending={P0: 5},
        stored_up_to={P0: 9, P1: 7},
        known={P0: 3, P1: 7},
    )
    # P0: delivery at 5 still owed; P1: nothing owed but nothing new either; r[2]: never stored.
    assert moved == {P0: 5}
    # A successor whose table lags its predecessor's never commits below the predecessor.
    assert watermarks_to_commit([P0], {}, {P0: 4}, {P0: 10}) == {}
    assert watermarks_to_commit([P0], {}, {P0: 12}, {P0: 10}) == {P0: 12}


@in_loop
async def test_partitions_given_up_let_their_deliveries_in_flight_finish_within_the_bound(tmp_path):
    class SlowReceiver(Receiver):
        async def post(self, target, delivery, *, secret, attempt, now_s):
            await asyncio.sleep(0.05 if delivery.request_id == "quick" else 30)
            return await super().post(target, delivery, secret=secret, attempt=attempt, now_s=now_s)

    rig = Rig(tmp_path, SlowReceiver())
    rig.sender._owner = Owner(P0, P1)
    async with rig.store:
        await store_from(rig.store, ("quick", P0, 0), ("stuck", P1, 0))
        await rig.sender.send_due()
        cancelled = await rig.sender.drain([P0, P1], timeout_s=0.5)
        delivered = [
            c["body"].split(b'"request_id":"')[1].split(b'"')[0].decode() for c in rig.receiver.calls
        ]
        left = await rig.store.on_connection(rig.outbox.pending)
    assert (cancelled, delivered) == (1, ["quick"])
    assert left == 1, "the cancelled delivery stays, for the successor"


@in_loop
async def test_a_failed_attempt_keeps_its_row_and_its_source(tmp_path):
    rig = Rig(tmp_path, Receiver(FAIL))
    rig.sender._owner = Owner(P0)
    async with rig.store:
        await store_from(rig.store, ("a", P0, 7))
        await rig.run_due()
        [row] = await rig.store.on_connection(lambda db: rig.outbox.due(db, now_ms=2**62, limit=5))
        assert row.source == ReplySource("r", 0, 7)
