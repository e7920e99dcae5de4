"""``GET /v1/backlog``: what admission sees, per tier, in priority order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from inferq.ingest.admission import AdmissionPolicy
from inferq.ingest.backlog import BacklogSnapshot, BacklogSource
from inferq.ingest.errors import NotAuthenticatedError
from inferq.messaging.tiers import TIERS_BY_PRIORITY


def describe_backlog(snapshot: BacklogSnapshot, admission: AdmissionPolicy) -> dict[str, dict[str, Any]]:
    """Per tier: backlog (records, None when unknown), capacity, fill ratio, when it was read."""
    view: dict[str, dict[str, Any]] = {}
    for tier in TIERS_BY_PRIORITY:
        lag = snapshot.backlogs.get(tier)
        ratio = admission.fill_ratio(tier, lag)
        view[tier.value] = {
            "backlog": lag,
            "capacity": admission.capacity[tier],
            "fill_ratio": None if ratio is None else round(ratio, 4),
            "refreshed_at_ms": snapshot.refreshed_at_ms,
            "known": lag is not None,
        }
    return view


class BacklogEndpoint:
    """The ``GET /v1/backlog`` handler (`handle`): the latest snapshot; never waits for Kafka.

    `caller` authenticates the request (any tenant's key; 401 without one, open mode asks none)."""

    def __init__(
        self, backlogs: BacklogSource, admission: AdmissionPolicy, *, caller: Callable[[Request], object]
    ) -> None:
        self._backlogs = backlogs
        self._admission = admission
        self._caller = caller

    async def handle(self, request: Request) -> Response:
        try:
            self._caller(request)
        except NotAuthenticatedError as exc:
            return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers())
        return JSONResponse(describe_backlog(self._backlogs.snapshot(), self._admission))
