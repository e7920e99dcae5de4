"""The results service's HTTP answers: ``GET /v1/requests/{request_id}`` and ``GET /healthz``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.messaging.limits import ID_PATTERN, MAX_ID_CHARS
from services.results.store import ResultStore
from services.results.view import public_view

_BAD_ID = (
    f"request_id must be 1-{MAX_ID_CHARS} characters of letters, digits, '.', '_', ':' or '-' "
    "(ingest never accepts another)"
)


@dataclass(frozen=True)
class Health:
    """What ``/healthz`` says: `status` ("ok", "starting", or what stopped) and whether the service
    can do its job (503 when not)."""

    status: str
    healthy: bool = True


class ResultRoutes:
    """Handlers reading `store` (off the event loop, see `ResultStore`); `health` says whether the
    consumer is running (and the retention task)."""

    def __init__(self, store: ResultStore, health: Callable[[], Health]) -> None:
        self._store = store
        self._health = health

    async def get_result(self, request: Request) -> Response:
        """200 with `public_view` of the first result for the id; 404 while there is none (or past
        retention); 422 for an id no request can have, which is not echoed back."""
        request_id = request.path_params["request_id"]
        if not isinstance(request_id, str) or not ID_PATTERN.fullmatch(request_id):
            return JSONResponse({"error": _BAD_ID}, status_code=422)
        result = await self._store.get(request_id)
        if result is None:
            return JSONResponse({"error": f"no result for request_id {request_id!r} (yet)"}, status_code=404)
        return JSONResponse(public_view(result))

    async def healthz(self, _: Request) -> Response:
        """200 "ok" once consuming ("starting" before); 503 when the consumer or the retention task
        has stopped. With how many results are stored."""
        health = self._health()
        body = {"status": health.status, "results": await self._store.count()}
        return JSONResponse(body, status_code=200 if health.healthy else 503)
