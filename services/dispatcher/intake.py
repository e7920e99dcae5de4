"""Intake: fetched records into the read-ahead, or straight to their outcome.

Per record, in offset order: skip what a previous owner already answered (commit metadata) or what
this member still runs from before a rebalance; decode (a poison record goes to the dead-letter topic
and never blocks its partition); expire what is past its deadline (answered EXPIRED, no LLM call);
and admit the rest to the waiting room while its tier's read-ahead has room. The partition is rewound
to the first record left over, so it is fetched again later and the read-ahead bound holds exactly.
A retry record that is not due yet holds its partition back (paused) until it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from services.dispatcher.consumer import FetchedRecord, Partition, TierConsumer
from services.dispatcher.inflight import InFlight
from services.dispatcher.metrics import DispatcherMetrics
from services.dispatcher.offsets import OffsetTracker
from services.dispatcher.pausing import Pauses
from services.dispatcher.poison import PoisonWatch
from services.dispatcher.waiting import WaitingRoom
from services.dispatcher.work import Work
from services.dispatcher.writer import OutcomeWriter
from services.messaging.codec import request_codec
from services.messaging.errors import DecodeError
from services.messaging.records import runnable_params
from services.messaging.tiers import Tier
from services.messaging.topics import TopicNames

log = logging.getLogger("inferq.dispatcher")


class Intake:
    def __init__(
        self,
        *,
        consumer: TierConsumer,
        topics: TopicNames,
        offsets: OffsetTracker,
        room: WaitingRoom,
        pauses: Pauses,
        writer: OutcomeWriter,
        inflight: InFlight,
        metrics: DispatcherMetrics,
        readahead: int,
        poison_alarm_ratio: float,
        clock_ms: Callable[[], int],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._consumer = consumer
        self._topics = topics
        self._offsets = offsets
        self._room = room
        self._pauses = pauses
        self._writer = writer
        self._inflight = inflight
        self._metrics = metrics
        self._readahead = readahead
        self._clock_ms = clock_ms
        self._requests = request_codec()
        self._poison = PoisonWatch(monotonic, threshold=poison_alarm_ratio)
        metrics.watch_poison(self._poison.ratios)

    def fetch_size(self) -> int:
        """How many records the next fetch may bring: the room left in the read-ahead (at least 1,
        so a due retry or an expired request still moves)."""
        room = sum(max(0, self._readahead - self._room.held(t)) for t in Tier)
        return max(1, room)

    def admit(self, partition: Partition, records: Sequence[FetchedRecord]) -> None:
        """Admit `records` (one fetch of `partition`) while the read-ahead has room and, on the retry
        topic, while they are due; rewind the partition to the first record left over."""
        retry = partition.topic == self._topics.retry
        offsets = self._offsets.owned_state(partition.topic, partition.partition)
        if offsets is None:
            return  # fetched just before its partition was revoked: the new owner reads it
        for record in records:
            if offsets.handled_already(record.offset):
                offsets.track(record.offset)  # its outcome is written or on its way: not redone
                self._metrics.record_skipped_redo()
                continue
            raw: bytes = record.value or b""
            try:
                request = self._requests.decode(raw)
                params = runnable_params(request, raw_size=len(raw))
            except DecodeError as exc:
                self._watch_poison(partition.topic, poison=True)
                offsets.track(record.offset)
                offsets.start(record.offset)
                self._inflight.spawn(self._writer.poison(offsets, record.offset, raw, str(exc)), "dlq")
                continue
            self._watch_poison(partition.topic, poison=False)
            tier = request.tier if retry else self._topics.tier_of(partition.topic) or request.tier
            if retry:
                wait_ms = (request.not_before_ms or 0) - self._clock_ms()
                if wait_ms > 0:
                    self._consumer.seek(partition, record.offset)
                    self._pauses.hold_back(partition, wait_ms / 1000)
                    return
                if self._pauses.room_is_full():
                    self._consumer.seek(partition, record.offset)
                    return
            elif self._pauses.tier_is_full(tier):
                self._consumer.seek(partition, record.offset)
                return
            offsets.track(record.offset)
            self._admit(
                Work(
                    request=request, tier=tier, offsets=offsets, offset=record.offset, raw=raw, params=params
                )
            )

    def _admit(self, work: Work) -> None:
        reason = self._room.check(work, self._clock_ms())
        if reason is not None:
            self._inflight.begin(work, self._writer.expire(work, reason), "expire")
        else:
            self._room.add(work)

    def _watch_poison(self, topic: str, *, poison: bool) -> None:
        if self._poison.record(topic, poison=poison):
            log.error(
                "%.0f%% of the records on %s in the last %.0f s could not be decoded and went to the "
                "dead-letter topic: is a producer writing the wrong format?",
                100 * self._poison.ratio(topic),
                topic,
                self._poison.window_s,
            )
