"""Readiness (``GET /readyz``), kept apart from liveness (``GET /healthz``).

Liveness says the process works: it fails only when a supervised task died, and an orchestrator
restarts the process. Readiness says the process may take traffic now: Kafka answers, the topics
it needs exist, and (per service) its consumer is assigned; an orchestrator stops routing to it
until it is ready again, and never restarts it for that.

A probe must not cost a Kafka round trip: `TopicsWatch` re-runs the start-up topic check
(`inferq.messaging.admin.require_topics`) in the background every `check_interval_s`, each check
bounded by `check_timeout_s`, and a probe reads the last answer. `readiness_endpoint` turns a
service's list of problems into 200 ``{"status": "ready"}`` or 503 ``{"status": "not ready",
"reasons": [...]}``. The reasons are short and carry no address or secret; the detail is logged
once per change.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.messaging.errors import MessagingError, MissingTopicsError
from inferq.supervised import SupervisedTask

log = logging.getLogger("inferq.readiness")

_STOP_TIMEOUT_S = 2.0


class ReadinessSettings(BaseSettings):
    """How often and how patiently Kafka is checked for ``/readyz`` (env prefix ``INFERQ_READY_``)."""

    model_config = SettingsConfigDict(
        env_prefix="INFERQ_READY_", extra="ignore", use_attribute_docstrings=True
    )

    check_interval_s: float = Field(default=10.0, gt=0, le=300)
    """Between two checks: how stale ``/readyz``'s view of Kafka may be."""
    check_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """One check's bound; past it Kafka counts as unreachable."""


class TopicsWatch:
    """The last answer of `check` (raises `MissingTopicsError`, or `MessagingError` when Kafka does
    not answer or refuses us), refreshed in a background task every `interval_s`.

    `check` is blocking (librdkafka's admin client) and runs in a thread, bounded by its own
    timeout. Before the first answer the watch reports "kafka not checked yet", unless `passed()`
    records the service's own start-up check. Start and stop are idempotent.
    """

    def __init__(self, check: Callable[[], None], *, interval_s: float) -> None:
        self._check = check
        self._interval_s = interval_s
        self._problem: str | None = "kafka not checked yet"
        self._task = SupervisedTask(
            "readiness-watch",
            ended="readiness watch stopped; /readyz answers 503",
            stop_timeout_s=_STOP_TIMEOUT_S,
            log=log,
        )

    def passed(self) -> None:
        """Record a check that passed outside the watch (the service's start-up check)."""
        self._problem = None

    def problem(self) -> str | None:
        """None when the last check passed; otherwise why not (short, no addresses)."""
        if self._task.failed:
            return "readiness watch stopped"
        return self._problem

    async def check_once(self) -> None:
        """Run the check now and keep its answer (logged when it changes)."""
        try:
            await asyncio.to_thread(self._check)
        except MissingTopicsError as exc:
            self._set(f"topics missing: {', '.join(sorted(exc.missing))}", exc)
        except MessagingError as exc:
            self._set("kafka unreachable", exc)
        else:
            self._set(None, None)

    async def start(self) -> None:
        """Check now (unless `passed()` already said so), then every `interval_s`."""
        self._task.start(self._run(first_now=self._problem is not None))

    async def stop(self) -> None:
        await self._task.stop()

    async def _run(self, *, first_now: bool) -> None:
        if first_now:
            await self.check_once()
        while True:
            await asyncio.sleep(self._interval_s)
            await self.check_once()

    def _set(self, problem: str | None, exc: Exception | None) -> None:
        if problem == self._problem:
            return
        if problem is None:
            log.info("kafka checked: reachable, topics present; ready (was: %s)", self._problem)
        else:
            # The error's text names the topics or the bootstrap address, never a credential.
            log.warning("not ready: %s (%s)", problem, exc)
        self._problem = problem


def readiness_endpoint(problems: Callable[[], list[str]]) -> Callable[[Request], Awaitable[Response]]:
    """``GET /readyz``: 200 ``{"status": "ready"}`` when `problems()` is empty, else 503 with them."""

    async def readyz(_: Request) -> Response:
        reasons = problems()
        if reasons:
            return JSONResponse({"status": "not ready", "reasons": reasons}, status_code=503)
        return JSONResponse({"status": "ready"})

    return readyz
