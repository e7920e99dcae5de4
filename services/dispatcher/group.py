"""How many dispatchers are in the group: the fallback budget share when coordination is lost."""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from inferq.messaging.kafka_config import KafkaSettings

log = logging.getLogger("inferq.dispatcher.group")


class GroupSizeProbe:
    """Reads the group's member count every `interval_s` in a daemon thread; `size()` never blocks.

    Until the first answer, and whenever the broker cannot say, the last known size is kept (1 at
    first: a lone dispatcher may use the whole budget).
    """

    def __init__(self, kafka: KafkaSettings, group_id: str, interval_s: float = 10.0) -> None:
        self._admin = AdminClient(kafka.admin_config())
        self._group_id = group_id
        self._interval_s = interval_s
        self._size = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="group-size", daemon=True)

    async def start(self) -> None:
        if self._thread.ident is None:  # a thread starts once
            self._thread.start()

    async def stop(self) -> None:
        # Not joined: a describe call in flight may take its whole timeout; the thread is a daemon.
        self._stop.set()

    def size(self) -> int:
        return self._size

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                futures = self._admin.describe_consumer_groups([self._group_id], request_timeout=5)
                description = futures[self._group_id].result(timeout=6)
                self._size = max(1, len(description.members))
            except (KafkaException, TimeoutError) as exc:
                log.debug("group size unknown, keeping %d: %s", self._size, exc)
            self._stop.wait(max(0.0, self._interval_s - (time.monotonic() - started)))
