"""Intake: fetched records into the read-ahead, or straight to their outcome.

Per record, in offset order: skip what a previous owner already answered (commit metadata) or what
this member still runs from before a rebalance; stop at the bounds (the partition's window of
uncommitted offsets, the tier's share of memory: every record counts, poison and expired ones too);
decode (a poison record goes to the dead-letter topic and never blocks its partition); apply the
record rules (``record_rules.py``: clamp what is out of range, refuse what must not run: dead letter
and FAILED); expire what is past its deadline (answered EXPIRED, no LLM call); and admit the rest to
the read-ahead. The partition is rewound to the first record left over, so it is fetched again
later and the bounds hold exactly. A retry record that is not due yet holds its partition back
(paused) until it is, at most the maximum backoff from when it was first read.

Origin (``record_origin.py``): with a tenants file, a decoded record whose signature does not verify
for the tenant it names (or with a service key) goes to the dead-letter topic with the reason and is
answered nothing (a FAILED result under that tenant would be one the forger planted); the partition
moves on. Its `created_at_ms` is bounded by the broker's append time (`appended_ms`, the record
rules).

Tenants (``tenant_check.py``): after the record rules, the tenant check refuses a tenant the file
does not list and what the tenant is not entitled to (dead letter and FAILED, like the rules'
refusals) and narrows the rest. A request of a tenant over its share of the tier's read-ahead
(``readahead_shares.py``) is *deferred* (``deferred.py``): tracked as not done, left in Kafka, and
the partition read on for the others; `rewind` seeks back to it once the tenant has room.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from inferq import tracing
from inferq.dispatcher.consumer import LOG_APPEND_TIME, FetchedRecord, Partition
from inferq.dispatcher.deferred import DeferredRecords, ReadPositions
from inferq.dispatcher.errors import RefusedRequestError
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.parts import HeldBacklog, Instruments, KafkaPorts
from inferq.dispatcher.poison import PoisonWatch
from inferq.dispatcher.readahead_shares import ReadaheadShares
from inferq.dispatcher.record_rules import RecordRules
from inferq.dispatcher.tenant_check import TenantCheck
from inferq.dispatcher.work import Work
from inferq.dispatcher.writer import OutcomeWriter
from inferq.messaging import dead_letters, limits
from inferq.messaging.codec import request_codec
from inferq.messaging.errors import DecodeError
from inferq.messaging.record_signing import signature_of
from inferq.messaging.records import InferenceRequest
from inferq.messaging.tiers import Tier

log = logging.getLogger("inferq.dispatcher")

# A dead-letter reason is a header and a log line: short.
MAX_REASON_CHARS = 200
# Re-reading deferred records, tracked records between them are skipped; a gap longer than this is
# jumped over with a seek instead (a seek drops the fetched buffer, so short gaps are read through).
REREAD_JUMP = 200


def poison_reason(exc: DecodeError) -> str:
    """Why a record is poison, as `DecodeError` says it, without the record's content: a decoder's
    error can quote the bytes it choked on (a UnicodeDecodeError carries the whole string), so of a
    wrapped error only its type is kept."""
    reason = exc.reason
    if exc.__cause__ is not None:
        reason = f"{reason.split(':', 1)[0]} ({type(exc.__cause__).__name__})"
    return f"cannot decode record ({exc.raw_size} bytes): {reason}"[:MAX_REASON_CHARS]


@dataclass(frozen=True)
class Admission:
    """What decides a record's way in: the record rules, the tenant check, the tenants' shares of
    the read-ahead, the read-ahead per tier, and the poison ratio that raises the alarm."""

    rules: RecordRules
    tenant_check: TenantCheck | None
    shares: ReadaheadShares | None
    readahead_per_tier: int
    poison_alarm_ratio: float


class Intake:
    def __init__(
        self,
        *,
        kafka: KafkaPorts,
        held: HeldBacklog,
        writer: OutcomeWriter,
        admission: Admission,
        positions: ReadPositions,
        instruments: Instruments,
    ) -> None:
        self._consumer = kafka.consumer
        self._topics = kafka.topics
        self._offsets = held.offsets
        self._readahead = held.readahead
        self._pauses = held.pauses
        self._writer = writer
        self._inflight = held.inflight
        self._metrics = instruments.metrics
        self._rules = admission.rules
        self._per_tier = admission.readahead_per_tier
        self._clock_ms = instruments.clock_ms
        self._requests = request_codec()
        self._poison = PoisonWatch(instruments.monotonic, threshold=admission.poison_alarm_ratio)
        # Per retry partition, the record held back last and when it is due: read again, it keeps
        # that time (a not-before clamped when first read must not move with every read). One entry
        # per retry partition.
        self._held_head: dict[Partition, tuple[int, int]] = {}
        self._tenant_check = admission.tenant_check
        self._shares = admission.shares
        self.deferred = DeferredRecords()
        # Per partition, the next offset the consumer returns (where it reads); pausing reads it too.
        self._positions = positions
        self._metrics.watch_poison(self._poison.ratios)
        # Request topics seen with producer timestamps (CreateTime): said once each.
        self._create_time_topics: set[str] = set()

    def fetch_size(self) -> int:
        """How many records the next fetch may bring: the places left in the read-ahead (at least 1,
        so a due retry or an expired request still moves)."""
        free = sum(max(0, self._per_tier - self._readahead.held(t)) for t in Tier)
        return max(1, free)

    def admit(self, partition: Partition, records: Sequence[FetchedRecord]) -> None:
        """Take `records` (one fetch of `partition`) while the bounds allow and, on the retry topic,
        while they are due; rewind the partition to the first record left over."""
        source_tier = self._topics.tier_of(partition.topic)  # None: the retry topic
        offsets = self._offsets.owned_state(partition.topic, partition.partition)
        if offsets is None:
            return  # fetched just before its partition was revoked: the new owner reads it
        for record in records:
            self._positions.move(partition, record.offset + 1)
            if offsets.seen(record.offset):
                if not self._reread(partition, offsets, record, source_tier):
                    return
                continue
            if offsets.handled_already(record.offset):
                offsets.track(record.offset)  # its outcome is written or on its way: not redone
                self._metrics.record_skipped_redo()
                continue
            if source_tier is None:
                full = self._pauses.readahead_is_full()
            else:
                full = self._pauses.tier_is_full(source_tier)
            if full or offsets.window_full():
                self._seek(partition, record.offset)
                return
            if not self._take(partition, offsets, record, source_tier):
                self._seek(partition, record.offset)
                return

    def rewind(self) -> None:
        """Seek each partition back to its first deferred record whose tenant has room again
        (enough of it to be worth the re-fetch)."""
        if self._shares is None:
            return
        shares = self._shares

        def worth(tier: Tier, tenant: str) -> bool:
            return shares.worth_rereading(tier, tenant, self.deferred.tenants(tier))

        for partition, _ in self.deferred.partitions():
            target = self.deferred.next_offset(partition, 0, worth)
            at = self._positions.at(partition)
            if target is not None and target < (at if at is not None else target + 1):
                self._seek(partition, target)
                self._pauses.update()  # a partition paused for its full window is read again

    def _reread(
        self, partition: Partition, offsets: PartitionOffsets, record: FetchedRecord, source_tier: Tier | None
    ) -> bool:
        """A record read again after a rewind: a deferred one whose tenant has room is taken, the
        rest skipped; False when the partition was sought elsewhere (stop reading this batch)."""
        key = self.deferred.key_at(partition, offsets, record.offset)
        if key is not None and source_tier is not None and self._has_room(*key):
            if self._pauses.tier_is_full(source_tier):
                self._seek(partition, record.offset)
                return False
            self._take(partition, offsets, record, source_tier, reread=True)
            return True
        target = self.deferred.next_offset(partition, record.offset + 1, self._has_room)
        if target is None:
            target = offsets.next_to_read
        if target is not None and target > record.offset + REREAD_JUMP:
            self._seek(partition, target)
            return False
        return True

    def _has_room(self, tier: Tier, tenant: str) -> bool:
        if self._shares is None:
            return not self._pauses.tier_is_full(tier)
        return self._shares.has_room(tier, tenant, self.deferred.tenants(tier))

    def _seek(self, partition: Partition, offset: int) -> None:
        self._consumer.seek(partition, offset)
        self._positions.move(partition, offset)

    def _take(
        self,
        partition: Partition,
        offsets: PartitionOffsets,
        record: FetchedRecord,
        source_tier: Tier | None,
        *,
        reread: bool = False,
    ) -> bool:
        """One record to its outcome or into the read-ahead (or deferred, its tenant over its share);
        False when it must wait (a retry not due). `reread`: a deferred record read again, tracked
        already."""
        raw: bytes = record.value or b""
        now_ms = self._clock_ms()

        def track() -> None:
            if reread:
                self.deferred.take(partition, record.offset)
            else:
                offsets.track(record.offset)

        try:
            request = self._requests.decode(raw)
            if self._tenant_check is not None:
                refusal = self._tenant_check.origin(
                    request,
                    record_key=record.key,
                    value=raw,
                    signature=signature_of(record.headers),
                    retry_topic=source_tier is None,
                )
                if refusal is not None:
                    track()
                    self._unverified(partition, offsets, record, request, refusal)
                    return True
            checked = self._rules.check(
                request,
                source_topic=partition.topic,
                now_ms=now_ms,
                raw_size=len(raw),
                appended_ms=self._appended_ms(partition, record) if source_tier is not None else None,
            )
            if self._tenant_check is not None:
                checked = self._tenant_check.check(checked)
        except DecodeError as exc:
            self._watch_poison(partition.topic, poison=True)
            track()
            offsets.start(record.offset)
            reason = poison_reason(exc)
            self._inflight.spawn(self._writer.poison(offsets, record.offset, raw, reason), "dlq", source_tier)
            return True
        except RefusedRequestError as exc:
            self._watch_poison(partition.topic, poison=False)
            track()
            work = Work(
                request=exc.request,
                tier=exc.tier,
                offsets=offsets,
                offset=record.offset,
                raw=raw,
                reply_topic=exc.reply_topic,
                trace=tracing.extract(getattr(record, "headers", None)),
            )
            log.warning(
                "request %s at %s@%d refused: %s", work.request_id, partition, record.offset, exc.reason
            )
            self._metrics.record_refused(work.request.tenant, exc.cause)
            self._inflight.begin(work, self._writer.refuse(work, exc.reason), "refuse")
            return True
        reply_topic = checked.reply_topic or self._topics.results
        if source_tier is not None and self._writer.answered.contains(
            checked.request.tenant, checked.request.request_id, reply_topic
        ):
            # Another copy of a request answered OK here (a mirror's re-copy, a resend): its outcome
            # is on the reply topic already; complete the offset, no call (``answered.py``).
            track()
            offsets.complete(record.offset)
            self._metrics.record_copy_skipped(checked.tier)
            return True
        if source_tier is None:
            held = self._held_head.get(partition)
            if held is not None and held[0] == record.offset:
                due_ms = held[1]
            else:
                due_ms = self._rules.due_ms(checked.request.not_before_ms, now_ms)
            if due_ms > now_ms:
                self._held_head[partition] = (record.offset, due_ms)
                self._pauses.hold_back(partition, (due_ms - now_ms) / 1000)
                return False
            self._held_head.pop(partition, None)
        work = Work(
            request=checked.request,
            tier=checked.tier,
            offsets=offsets,
            offset=record.offset,
            raw=raw,
            params=checked.params,
            reply_topic=checked.reply_topic,
            trace=tracing.extract(getattr(record, "headers", None)),
        )
        expired = self._readahead.check(work, now_ms)
        tenant = checked.request.tenant
        if expired is None and source_tier is not None and not self._has_room(checked.tier, tenant):
            if not reread:
                offsets.track(record.offset)
                self.deferred.defer(partition, offsets, record.offset, (checked.tier, tenant))
            return True
        self._watch_poison(partition.topic, poison=False)
        for name in checked.clamped:
            self._metrics.record_clamped(name)
        track()
        if expired is not None:
            self._inflight.begin(work, self._writer.expire(work, expired), "expire")
        else:
            self._readahead.add(work)
        return True

    def _unverified(
        self,
        partition: Partition,
        offsets: PartitionOffsets,
        record: FetchedRecord,
        request: InferenceRequest,
        reason: str,
    ) -> None:
        """A record whose tenant is not believed: dead letter with the reason, no answer."""
        self._watch_poison(partition.topic, poison=False)
        log.warning("record at %s@%d refused: %s", partition, record.offset, reason)
        self._metrics.record_refused(request.tenant, "unverified_record")
        about = [
            (name, value.encode())
            for name, value in (
                (dead_letters.TENANT_HEADER, request.tenant),
                (dead_letters.REQUEST_ID_HEADER, request.request_id),
            )
            if limits.ID_PATTERN.fullmatch(value)  # a header shows no hostile bytes
        ]
        offsets.start(record.offset)
        raw = record.value or b""
        self._inflight.spawn(
            self._writer.poison(offsets, record.offset, raw, reason, key=record.key, about=about),
            "dlq",
            self._topics.tier_of(partition.topic),
        )

    def _appended_ms(self, partition: Partition, record: FetchedRecord) -> int | None:
        """When the broker appended `record`: its timestamp if the topic is LogAppendTime, else None
        (a producer's own clock bounds nothing; said once per topic)."""
        if record.timestamp_type == LOG_APPEND_TIME:
            return record.timestamp
        if partition.topic not in self._create_time_topics:
            self._create_time_topics.add(partition.topic)
            log.warning(
                "%s has producer timestamps (CreateTime): a record's created_at_ms is bounded only by "
                "the dispatcher's clock; set message.timestamp.type=LogAppendTime (`inferq topics "
                "create` does; docs/tenants.md)",
                partition.topic,
            )
        return None

    def _watch_poison(self, topic: str, *, poison: bool) -> None:
        if self._poison.record(topic, poison=poison):
            log.error(
                "%.0f%% of the records on %s in the last %.0f s could not be decoded and went to the "
                "dead-letter topic: is a producer writing the wrong format?",
                100 * self._poison.ratio(topic),
                topic,
                self._poison.window_s,
            )
