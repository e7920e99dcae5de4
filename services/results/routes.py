"""The results service's HTTP answers: ``GET /v1/requests/{request_id}`` and ``GET /healthz``."""

from __future__ import annotations

from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.results.store import ResultStore
from services.results.view import public_view


class ResultRoutes:
    """Handlers reading `store` (off the event loop, see `ResultStore`); `consuming` says whether the
    consumer has joined the reply topic yet."""

    def __init__(self, store: ResultStore, consuming: Callable[[], bool]) -> None:
        self._store = store
        self._consuming = consuming

    async def get_result(self, request: Request) -> Response:
        """200 with `public_view` of the first result for the id; 404 while there is none."""
        request_id = request.path_params["request_id"]
        result = await self._store.get(request_id)
        if result is None:
            return JSONResponse({"error": f"no result for request_id {request_id!r} (yet)"}, status_code=404)
        return JSONResponse(public_view(result))

    async def healthz(self, _: Request) -> Response:
        """ "ok" once consuming ("starting" before), and how many results are stored."""
        status = "ok" if self._consuming() else "starting"
        return JSONResponse({"status": status, "results": await self._store.count()})
