"""The dispatcher group's backlog per tier, read from Kafka in the background.

A tier's backlog is what the dispatchers still have to handle, summed over the partitions of the
tier's request topic: the high watermark minus the group's committed offset (minus the low
watermark where the group has not committed yet), less the offsets answered beyond the commit that
the commit's metadata lists (`messaging.lag.unhandled`). So a commit held back by one slow call, with
many requests answered behind it, does not read as a full tier and make admission refuse chat.

`KafkaBacklogReader` refreshes a cached `BacklogSnapshot` from one daemon thread (every Kafka call
bounded by a timeout), so an HTTP request only reads a reference and never waits for Kafka. When the
lag cannot be read the snapshot says "unknown" (None per tier) and admission lets requests through:
the produce itself then answers 503 if Kafka is really gone.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

# OffsetSpec is public API of confluent_kafka.admin but missing from its type stubs' exports.
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from inferq.clock import wall_ms
from inferq.messaging.commit_metadata import readable_metadata
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.lag import unhandled
from inferq.messaging.tiers import Tier

log = logging.getLogger("inferq.ingest.backlog")

# librdkafka's "no committed offset" (OFFSET_INVALID).
_NO_OFFSET = -1001
_T = TypeVar("_T")
_STOP_WAIT_S = 0.25
# The group coordinator moves or loads (a broker started, restarted or left): asked again, within
# the read's deadline, it answers. Any other error ends the read.
_COORDINATOR_MOVING = frozenset({KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS})
_COORDINATOR_RETRY_S = 0.1
# Plain values (confluent-kafka 2.16 leaves OffsetSpec unannotated): the ends of a partition.
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class BacklogSnapshot:
    """Lag per tier in records (None: unknown) and when it was read (epoch ms; None: never)."""

    backlogs: Mapping[Tier, int | None] = field(default_factory=lambda: MappingProxyType(dict.fromkeys(Tier)))
    refreshed_at_ms: int | None = None

    @classmethod
    def unknown(cls, refreshed_at_ms: int | None = None) -> BacklogSnapshot:
        return cls(MappingProxyType(dict.fromkeys(Tier)), refreshed_at_ms)

    def known(self, tier: Tier) -> bool:
        return self.backlogs.get(tier) is not None


class AdmittedSinceRead:
    """The backlog admission weighs: the snapshot's, plus what this ingest admitted since it was read.

    The snapshot is refreshed every `refresh_interval_s` (0.5 s); between two reads a flooding
    tenant's posts would all be weighed against the same stale lag, overfill the tier, and another
    tenant's chat then met "tier full" until the next read. So each tier's backlog is the read one
    plus this ingest's own admissions to it since that read (`admitted`); a new snapshot (another
    object: the reader publishes a fresh one per read) starts the count again. A request is counted
    when it is admitted, before its produce is awaited, so requests admitted concurrently see each
    other; one whose produce fails is taken back (`withdrawn`). The dispatchers' progress since the
    read is not subtracted (admission errs towards refusing for at most one period), other ingest
    instances' admissions are not seen, and records written between a read and its publication are
    dropped from the count: each only ever brings the estimate back to the lag read. An unknown
    backlog stays unknown.
    """

    def __init__(self) -> None:
        self._read: BacklogSnapshot | None = None
        self._counts: dict[Tier, int] = dict.fromkeys(Tier, 0)

    def backlogs(self, snapshot: BacklogSnapshot) -> Mapping[Tier, int | None]:
        """Per tier, `snapshot`'s backlog plus the admissions counted since it was read."""
        self._follow(snapshot)
        return {t: None if (lag := snapshot.backlogs.get(t)) is None else lag + self._counts[t] for t in Tier}

    def admitted(self, snapshot: BacklogSnapshot, tier: Tier) -> None:
        """One request joined `tier` while `snapshot` was the latest read."""
        self._follow(snapshot)
        self._counts[tier] += 1

    def withdrawn(self, snapshot: BacklogSnapshot, tier: Tier) -> None:
        """A request counted by `admitted(snapshot, tier)` was not written after all. Nothing to take
        back once a newer read restarted the count: that read could not include it."""
        if snapshot is self._read and self._counts[tier] > 0:
            self._counts[tier] -= 1

    def _follow(self, snapshot: BacklogSnapshot) -> None:
        if snapshot is not self._read:
            self._read = snapshot
            self._counts = dict.fromkeys(Tier, 0)


class BacklogSource(Protocol):
    """Where ingest gets backlogs from. `snapshot()` must not block: it is called per request."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def snapshot(self) -> BacklogSnapshot: ...


class BacklogUnavailableError(Exception):
    """The lag could not be read within the timeout; admission treats every tier as unknown."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"backlog unreadable: {reason}")
        self.reason = reason


class KafkaBacklogReader:
    """Reads the group's lag per tier (watermarks with an AdminClient, the group's commits with a
    consumer that never subscribes); refreshed by a background thread.

    Start once, stop once (both idempotent). `read_once()` is the bounded read itself, usable alone.
    """

    def __init__(
        self,
        kafka: KafkaSettings,
        group_id: str,
        *,
        refresh_interval_s: float = 0.5,
        timeout_s: float = 1.0,
        wall_clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        if refresh_interval_s <= 0 or timeout_s <= 0:
            raise ValueError("refresh_interval_s and timeout_s must be > 0")
        self._config = kafka.admin_config() | {"client.id": "inferq-ingest-backlog"}
        self._commits_config = kafka.admin_config() | {
            "client.id": "inferq-ingest-backlog-commits",
            "group.id": group_id,
            # Never subscribes and never commits: it only reads the group's commits.
            "enable.auto.commit": False,
        }
        self._topics = {tier: kafka.topics.requests(tier) for tier in Tier}
        self._group_id = group_id
        self._interval_s = refresh_interval_s
        self._timeout_s = timeout_s
        # A snapshot older than one bounded read plus two periods means the refresher is stuck or dead.
        self._stale_after_s = timeout_s + 2 * refresh_interval_s
        self._wall_ms = wall_clock_ms
        self._admin: AdminClient | None = None
        self._commits: Consumer | None = None
        # (snapshot, monotonic time of the read): one tuple so a reader never pairs mismatched halves.
        self._current: tuple[BacklogSnapshot, float] = (BacklogSnapshot.unknown(), time.monotonic())
        self._readable = True
        self.last_refresh_s: float | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    @property
    def group_id(self) -> str:
        return self._group_id

    def snapshot(self) -> BacklogSnapshot:
        """The latest refresh; unknown when it is older than a refresh could possibly take."""
        current, at = self._current
        if time.monotonic() - at > self._stale_after_s:
            return BacklogSnapshot.unknown(current.refreshed_at_ms)
        return current

    def read_once(self) -> BacklogSnapshot:
        """One bounded read of every tier's lag; raises `BacklogUnavailableError`."""
        if self._admin is None:
            self._admin = AdminClient(self._config)
        if self._commits is None:
            # The group's commits are read by a consumer that never joins the group, not with
            # AdminClient.list_consumer_group_offsets: librdkafka (2.16 included) aborts the whole
            # process when that admin request meets NOT_COORDINATOR, as it does while a started or
            # restarted broker loads the group coordinator (librdkafka#5040); ingest died with it.
            self._commits = Consumer(self._commits_config)
        admin, commits = self._admin, self._commits
        deadline = time.monotonic() + self._timeout_s

        def remaining() -> float:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BacklogUnavailableError(f"no answer within {self._timeout_s:.1f} s")
            return left

        try:
            metadata = admin.list_topics(timeout=remaining())
            partitions: dict[Tier, list[TopicPartition]] = {}
            for tier, topic in self._topics.items():
                found = metadata.topics.get(topic)
                # A missing topic leaves its tier unknown; the start-up check names it.
                if found is not None and found.error is None:
                    partitions[tier] = [TopicPartition(topic, p) for p in sorted(found.partitions)]
            every = [tp for tps in partitions.values() for tp in tps]
            if not every:
                return BacklogSnapshot.unknown(self._wall_ms())
            # Both offset requests are in flight while the commits are read; one deadline bounds all.
            latest = admin.list_offsets({tp: _LATEST for tp in every}, request_timeout=remaining())
            earliest = admin.list_offsets({tp: _EARLIEST for tp in every}, request_timeout=remaining())
            group_commits = _committed(commits, every, remaining)
            high = {(tp.topic, tp.partition): _result(f, remaining()).offset for tp, f in latest.items()}
            low = {(tp.topic, tp.partition): _result(f, remaining()).offset for tp, f in earliest.items()}
            committed: dict[tuple[str, int], tuple[int | None, str | None]] = {}
            for tp in group_commits:
                if tp.error is not None:
                    raise BacklogUnavailableError(
                        f"committed offset of {tp.topic}[{tp.partition}]: {tp.error}"
                    )
                offset = None if tp.offset == _NO_OFFSET else tp.offset
                committed[(tp.topic, tp.partition)] = (offset, readable_metadata(tp))
        except KafkaException as exc:
            raise BacklogUnavailableError(str(exc.args[0] if exc.args else exc)) from exc
        except TimeoutError as exc:
            raise BacklogUnavailableError(f"no answer within {self._timeout_s:.1f} s") from exc
        backlogs: dict[Tier, int | None] = dict.fromkeys(Tier)
        for tier, tps in partitions.items():
            keys = [(tp.topic, tp.partition) for tp in tps]
            backlogs[tier] = sum(
                unhandled(high=high[k], low=low[k], committed=offset, metadata=metadata)
                for k in keys
                for offset, metadata in [committed.get(k, (None, None))]
            )
        return BacklogSnapshot(MappingProxyType(backlogs), self._wall_ms())

    def refresh(self) -> BacklogSnapshot:
        """Read once and publish the result; a failed read publishes "unknown" (never raises it)."""
        started = time.monotonic()
        try:
            snapshot = self.read_once()
        except BacklogUnavailableError as exc:
            snapshot = BacklogSnapshot.unknown(self._wall_ms())
            if self._readable:
                log.warning("dispatcher lag unknown, admitting without a backlog check: %s", exc)
            self._readable = False
        else:
            if not self._readable:
                log.info("dispatcher lag readable again")
            self._readable = True
        self.last_refresh_s = time.monotonic() - started
        self._current = (snapshot, time.monotonic())
        return snapshot

    def close(self) -> None:
        """Close the Kafka clients; the next read opens new ones. Not while a read runs."""
        commits, self._commits = self._commits, None
        self._admin = None
        if commits is not None:
            commits.close()

    def _run(self, stopping: threading.Event) -> None:
        try:
            while not stopping.is_set():
                started = time.monotonic()
                self.refresh()
                stopping.wait(max(0.0, self._interval_s - (time.monotonic() - started)))
        finally:
            # The reading thread closes the clients after its last read, unless a restart already
            # handed them to a newer thread.
            if self._thread is None or self._thread is threading.current_thread():
                self.close()

    async def start(self) -> None:
        if self._thread is not None:
            return
        # One event per thread: a restart must not revive a thread that is still finishing a read.
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stopping,), name="ingest-backlog", daemon=True
        )
        self._thread.start()

    async def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopping.set()
        # Shutdown does not wait out a read against an unreachable broker: the read is bounded by
        # `timeout_s`, holds nothing that needs closing, and the thread ends right after it.
        await asyncio.to_thread(thread.join, _STOP_WAIT_S)
        if thread.is_alive():
            log.debug("backlog reader ends after its current read (at most %.1f s)", self._timeout_s)


def _committed(
    commits: Consumer, every: list[TopicPartition], remaining: Callable[[], float]
) -> list[TopicPartition]:
    """The group's commits, asked again while its coordinator moves; `remaining` ends the wait."""
    while True:
        try:
            return commits.committed(every, timeout=remaining())
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or error.code() not in _COORDINATOR_MOVING:
                raise
        time.sleep(min(_COORDINATOR_RETRY_S, remaining()))


def _result(future: Future[_T], timeout_s: float) -> _T:
    return future.result(timeout=timeout_s)
