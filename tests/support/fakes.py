"""Fakes (not mocks) of the ingest app's edges: a producer that keeps what it is given, and backlog
sources whose lag the test decides."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from services.ingest.backlog import BacklogSnapshot
from services.messaging.producer import AsyncProducer
from services.messaging.tiers import Tier


class RecordingProducer(AsyncProducer):
    """A fake producer that acknowledges every record at once and keeps it."""

    def __init__(self) -> None:
        super().__init__({})
        self.sent: list[tuple[str, bytes, bytes | None]] = []

    async def start(self) -> None:
        return None

    async def produce(self, topic: str, value: bytes, *, key: bytes | None = None, **_: Any) -> Any:
        self.sent.append((topic, value, key))
        return None

    async def stop(self, flush_timeout_s: float = 10.0) -> int:
        return 0


class FakeBacklog:
    """A backlog source whose lags the test sets (None: unknown); started and stopped by the app."""

    def __init__(self, **lags: int | None) -> None:
        self.lags: dict[Tier, int | None] = {t: lags.get(t.value) for t in Tier}
        self.running = False

    async def start(self) -> None:
        self.running = True

    async def stop(self) -> None:
        self.running = False

    def snapshot(self) -> BacklogSnapshot:
        if all(lag is None for lag in self.lags.values()):
            return BacklogSnapshot.unknown()
        return BacklogSnapshot(MappingProxyType(dict(self.lags)), refreshed_at_ms=1_700_000_000_000)
