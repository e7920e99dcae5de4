"""The 70% alert: a log line when a tier's backlog nears its capacity, checked on every request and on
a timer.

Backlog also grows from producers writing to Kafka directly, so the alert cannot wait for an HTTP
request to notice it: `BacklogWatcher` looks at every refresh interval as well.
"""

from __future__ import annotations

import asyncio
import logging

from inferq.ingest.admission import AdmissionPolicy, FillAlarm
from inferq.ingest.backlog import BacklogSnapshot, BacklogSource
from inferq.messaging.tiers import Tier
from inferq.supervised import SupervisedTask

# The service's own logger, not a submodule's: operators filter on "inferq.ingest".
log = logging.getLogger("inferq.ingest")

_STOP_WAIT_S = 1.0


class BacklogAlarm:
    """Logs each tier once when its fill ratio rises above `alert_ratio`, and once when it is back
    below (see `FillAlarm` for the re-arm margin that keeps a hovering backlog quiet)."""

    def __init__(self, admission: AdmissionPolicy, alert_ratio: float) -> None:
        self._admission = admission
        self._alert_ratio = alert_ratio
        self._fill = FillAlarm(threshold=alert_ratio)

    def observe(self, snapshot: BacklogSnapshot) -> tuple[list[Tier], list[Tier]]:
        """Weigh one snapshot; returns (tiers that just rose above the ratio, tiers that fell back)."""
        admission = self._admission
        rose, fell = self._fill.observe({t: admission.fill_ratio(t, snapshot.backlogs.get(t)) for t in Tier})
        for tier in rose:
            log.warning(
                "tier %s backlog above %.0f%% of capacity (backlog %s, capacity %d): LOW is shed first",
                tier,
                self._alert_ratio * 100,
                snapshot.backlogs.get(tier),
                admission.capacity[tier],
            )
        for tier in fell:
            log.info("tier %s backlog back under %.0f%% of capacity", tier, self._alert_ratio * 100)
        return rose, fell


class BacklogWatcher:
    """Feeds `alarm` a snapshot of `backlogs` every `interval_s`, in one task. Start and stop are
    idempotent; stop cancels the task and waits for it at most a second; a watch that ends by
    itself (its snapshot raised) is logged."""

    def __init__(self, backlogs: BacklogSource, alarm: BacklogAlarm, *, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self._backlogs = backlogs
        self._alarm = alarm
        self._interval_s = interval_s
        self._task = SupervisedTask(
            "ingest-backlog-watch",
            ended="backlog watcher stopped: the 70% alert now waits for a request to notice",
            stop_timeout_s=_STOP_WAIT_S,
            log=log,
        )

    @property
    def running(self) -> bool:
        return self._task.started and not self._task.failed

    async def start(self) -> None:
        if not self._task.started:
            self._task.start(self._watch())

    async def stop(self) -> None:
        await self._task.stop()

    async def _watch(self) -> None:
        while True:
            self._alarm.observe(self._backlogs.snapshot())
            await asyncio.sleep(self._interval_s)
