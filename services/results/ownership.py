"""Which results replica sends which reply partition's webhooks: a consumer-group membership used
for ownership only, and the group's committed offset as the partition's done watermark.

Every replica reads every partition into its own table (`feed`), and every replica's outbox holds
every delivery; a delivery must still be sent by one replica, and by another one when that one
dies. So each replica is a member of the results group (`ResultsSettings.consumer_group`) on the
reply topics, but reads no record through it (its partitions are paused): the group's assignment
says which partitions' deliveries are this replica's, and the group coordinator moves them to a
survivor after `session_timeout_ms` when a replica dies (at once when it leaves cleanly).

The offset the owner commits for a partition is its **done watermark**: every delivery of a record
below it is over (delivered, gone, or dead-lettered), i.e. the lowest source offset still in the
outbox, or, with none, how far this replica has stored the partition. A replica taking a partition
over reads the committed watermark first and deletes its rows below it (its predecessor finished
them), and a result it reads later from below it queues nothing (`WebhookOutbox.mark_done_below`);
what is at or above it is sent again, with the same delivery id (derived from the result), so a
delivery the predecessor made after its last commit reaches the receiver twice at most, which
receivers deduplicate by ``webhook-id``. The owner commits after each delivery ends (at most
every `commit_interval_s`) and before giving partitions up, so that window is short. Every
replica also reads the other partitions' watermarks every `refresh_interval_s` and deletes what
their owners finished: the outbox of a replica that owns nothing stays bounded.

A database from a single results service (before replicas) keeps working: its group offsets meant
"stored, with its delivery in the outbox", which is a valid watermark, and its outbox rows without
a source are sent by the replica holding them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
from collections.abc import Awaitable, Callable, Collection, Mapping

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from inferq.messaging.reply_positions import ReplyPartition
from inferq.results.settings import ResultsSettings
from inferq.results.store import ResultStore
from inferq.results.table import stored_positions
from inferq.supervised import SupervisedTask
from inferq.webhooks.outbox import WebhookOutbox

log = logging.getLogger("inferq.results")

STOP_TIMEOUT_S = 10.0
RETRY_PAUSE_S = 1.0
# How long the loop waits for a delivery to end before its idle round (a fetch that finds nothing,
# every partition being paused, which shows the group this member is alive; the watermarks' refresh).
IDLE_WAIT_S = 0.2
# With `--region all`, how soon a regional reply topic created later joins the assignment.
PATTERN_METADATA_MAX_AGE_MS = 30_000


def watermarks_to_commit(
    owned: Collection[ReplyPartition],
    first_pending: Mapping[ReplyPartition, int],
    stored_up_to: Mapping[ReplyPartition, int],
    known: Mapping[ReplyPartition, int],
) -> dict[ReplyPartition, int]:
    """The done watermark of each owned partition that moved past `known` (the last committed or
    read): the lowest offset still owed in the outbox, else how far the partition is stored.
    A partition this replica has not stored yet and owes nothing in has none; a watermark never
    moves back (a replica whose table lags its predecessor's does not undo its commits)."""
    moved: dict[ReplyPartition, int] = {}
    for where in owned:
        candidate = min(first_pending.get(where, math.inf), stored_up_to.get(where, math.inf))
        if candidate == math.inf:
            continue
        watermark = max(int(candidate), known.get(where, 0))
        if watermark > known.get(where, -1):
            moved[where] = watermark
    return moved


class WebhookOwnership(ConsumerRebalanceListener):  # type: ignore[misc]
    """This replica's membership of the results group, for the webhooks of the partitions it is
    assigned. `owned()` is what the sender sends; `delivery_ended()` asks for a commit;
    `on_release(drain)` registers what must finish before partitions go (the sender's in-flight
    deliveries). Start and stop are idempotent; `stop` gives the partitions up first (drain, last
    commit), then leaves the group, so a survivor takes over at once."""

    def __init__(
        self,
        settings: ResultsSettings,
        store: ResultStore,
        outbox: WebhookOutbox,
        *,
        commit_interval_s: float = 0.02,
        refresh_interval_s: float = 5.0,
        drain_timeout_s: float = 5.0,
    ) -> None:
        self._settings = settings
        self._store = store
        self._outbox = outbox
        self._commit_interval_s = commit_interval_s
        self._refresh_interval_s = refresh_interval_s
        self._drain_timeout_s = drain_timeout_s
        self._owned: frozenset[ReplyPartition] = frozenset()
        # Per partition, the last watermark committed (by us) or read from the group.
        self._known: dict[ReplyPartition, int] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._progress = asyncio.Event()
        self._drains: list[Callable[[Collection[ReplyPartition], float], Awaitable[object]]] = []
        self._wakes: list[Callable[[], None]] = []
        self._task = SupervisedTask(
            "webhook-ownership",
            ended="webhook ownership stopped; this replica sends no webhook; /healthz answers 503",
            stop_timeout_s=STOP_TIMEOUT_S,
            log=log,
        )

    # --- what the sender sees -----------------------------------------------------------------------

    def owned(self) -> Collection[ReplyPartition]:
        return self._owned

    def delivery_ended(self) -> None:
        self._progress.set()

    def on_release(
        self,
        drain: Callable[[Collection[ReplyPartition], float], Awaitable[object]],
        wake: Callable[[], None],
    ) -> None:
        """`drain(partitions, timeout_s)` is awaited before partitions are given up; `wake()` is
        called once partitions were taken over."""
        self._drains.append(drain)
        self._wakes.append(wake)

    @property
    def failed(self) -> bool:
        return self._task.failed

    # --- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        if not self._task.started:
            self._task.start(self._run())

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self) -> None:
        settings = self._settings
        consumer = AIOKafkaConsumer(
            **settings.kafka.aiokafka_config(),
            # The group's description then says which replica (host, process) owns which partition.
            client_id=f"inferq-results-{socket.gethostname()}-{os.getpid()}",
            group_id=settings.consumer_group,
            # The offsets are done watermarks, committed by hand (never by a fetch: nothing is fetched).
            enable_auto_commit=False,
            # How soon a dead replica's partitions (and their webhooks) move to a survivor.
            session_timeout_ms=settings.session_timeout_ms,
            # A third of the session, as Kafka advises: two lost heartbeats are not yet a death.
            heartbeat_interval_ms=settings.session_timeout_ms // 3,
            **({"metadata_max_age_ms": PATTERN_METADATA_MAX_AGE_MS} if settings.all_regions else {}),
        )
        if settings.all_regions:
            consumer.subscribe(pattern=settings.kafka.topics.results_pattern, listener=self)
        else:
            consumer.subscribe(settings.reply_topics, listener=self)
        # Set before the start: the first assignment may arrive before `start` returns.
        self._consumer = consumer
        while True:
            try:
                await consumer.start()
                break
            except KafkaError as exc:
                log.error("cannot join the results group yet, trying again in 1 s: %s", exc)  # noqa: TRY400
                await asyncio.sleep(RETRY_PAUSE_S)
        try:
            refreshed_at = -math.inf
            loop = asyncio.get_running_loop()
            while True:
                try:
                    # Nothing is fetched (all paused); the call keeps the membership alive.
                    await consumer.getmany(timeout_ms=0)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._progress.wait(), IDLE_WAIT_S)
                    if self._progress.is_set():
                        # Committed at once: a successor resends only what ended after this commit.
                        self._progress.clear()
                        await self.commit_watermarks()
                        # Deliveries ending together share a commit.
                        await asyncio.sleep(self._commit_interval_s)
                    if loop.time() - refreshed_at >= self._refresh_interval_s:
                        await self.follow_others()
                        refreshed_at = loop.time()
                except KafkaError as exc:
                    log.error("webhook ownership: %s; trying again in 1 s", exc)  # noqa: TRY400
                    await asyncio.sleep(RETRY_PAUSE_S)
        finally:
            # Shutdown: give the partitions up (drain, last commit), then leave the group.
            with contextlib.suppress(KafkaError):
                await self._release(self._owned)
            self._consumer = None
            await consumer.stop()

    # --- the rebalance listener -------------------------------------------------------------------------

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        try:
            await self._release({ReplyPartition(tp.topic, tp.partition) for tp in revoked})
        except KafkaError as exc:
            # The successor then starts from the previous commit: deliveries sent again, not lost.
            log.warning("last webhook watermark not committed before the rebalance: %s", exc)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        # Ownership only: nothing of the reply topic is read through the group.
        consumer.pause(*assigned)
        marks: dict[ReplyPartition, int] = {}
        for tp in assigned:
            committed = await consumer.committed(tp)
            if committed is not None:
                marks[ReplyPartition(tp.topic, tp.partition)] = committed
        await self._learn(marks)
        self._owned = frozenset(ReplyPartition(tp.topic, tp.partition) for tp in assigned)
        log.info(
            "sending the webhooks of %s", ", ".join(sorted(f"{p.topic}[{p.partition}]" for p in self._owned))
        )
        for wake in self._wakes:
            wake()

    # --- watermarks --------------------------------------------------------------------------------------

    async def commit_watermarks(self, partitions: Collection[ReplyPartition] | None = None) -> None:
        """Commit the done watermark of the owned partitions (or of `partitions`) that moved."""
        consumer = self._consumer
        partitions = self._owned if partitions is None else partitions
        if consumer is None or not partitions:
            return
        first_pending, stored_up_to = await self._store.on_connection(
            lambda db: (self._outbox.first_pending(db, partitions), stored_positions(db))
        )
        moved = watermarks_to_commit(partitions, first_pending, stored_up_to, self._known)
        if moved:
            await consumer.commit(
                {TopicPartition(p.topic, p.partition): offset for p, offset in moved.items()}
            )
            self._known.update(moved)

    async def follow_others(self) -> None:
        """Read the watermarks of the partitions others own and delete what they finished."""
        consumer = self._consumer
        if consumer is None:
            return
        others = [
            TopicPartition(topic, partition)
            for topic in consumer.subscription()
            for partition in consumer.partitions_for_topic(topic) or ()
            if ReplyPartition(topic, partition) not in self._owned
        ]
        marks: dict[ReplyPartition, int] = {}
        for tp in others:
            committed = await consumer.committed(tp)
            if committed is not None:
                marks[ReplyPartition(tp.topic, tp.partition)] = committed
        await self._learn(marks)

    async def _learn(self, marks: Mapping[ReplyPartition, int]) -> None:
        moved = {p: offset for p, offset in marks.items() if offset > self._known.get(p, -1)}
        if moved:
            deleted = await self._store.on_connection(lambda db: self._outbox.mark_done_below(db, moved))
            self._known.update(moved)
            if deleted:
                log.debug("%d webhook deliveries finished by other replicas forgotten", deleted)

    async def _release(self, partitions: Collection[ReplyPartition]) -> None:
        """Stop sending `partitions`' deliveries, let those in flight end (bounded), commit."""
        if not partitions:
            return
        self._owned = self._owned - set(partitions)
        for drain in self._drains:
            await drain(partitions, self._drain_timeout_s)
        await self.commit_watermarks(partitions)
