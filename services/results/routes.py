"""The results service's HTTP answers: ``GET /v1/requests/{request_id}`` and ``GET /healthz``.

A result is read by its tenant only: the key names the tenant, the store is keyed (tenant,
request_id), and another tenant's id is answered exactly like an id nobody sent (404), so a
caller cannot even learn that it exists. In open mode (no tenants file, loopback only) the
optional ``?tenant=`` names the tenant (``default`` when left out); with a key it must be the key's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from opentelemetry.metrics import Meter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from services.messaging.limits import ID_PATTERN, MAX_ID_CHARS, MAX_TENANT_CHARS
from services.results.store import ResultStore
from services.results.view import public_view
from services.tenancy.errors import AuthenticationError
from services.tenancy.registry import TenantRegistry

_BAD_ID = (
    f"request_id must be 1-{MAX_ID_CHARS} characters of letters, digits, '.', '_', ':' or '-' "
    "(ingest never accepts another)"
)
_BAD_TENANT = (
    f"tenant must be given once, 1-{MAX_TENANT_CHARS} characters of letters, digits, '.', '_', ':' or '-'"
)


@dataclass(frozen=True)
class Health:
    """What ``/healthz`` says: `status` ("ok", "starting", or what stopped) and whether the service
    can do its job (503 when not)."""

    status: str
    healthy: bool = True


class ReadMetrics:
    """`inferq_results_reads_total{tenant, outcome}` (found, not_found) and
    `inferq_results_refused_total{reason[, tenant]}` (unauthenticated_*, not_entitled, invalid);
    `tenant` is a name from the tenants file or ``default`` in open mode, never the caller's text."""

    def __init__(self, meter: Meter) -> None:
        self._reads = meter.create_counter(
            "inferq_results_reads_total", description="results read, by outcome"
        )
        self._refused = meter.create_counter(
            "inferq_results_refused_total", description="result reads refused, by reason"
        )

    def read(self, tenant: str, *, found: bool) -> None:
        self._reads.add(1, {"tenant": tenant, "outcome": "found" if found else "not_found"})

    def refused(self, reason: str, tenant: str | None = None) -> None:
        self._refused.add(1, {"reason": reason} if tenant is None else {"reason": reason, "tenant": tenant})


class ResultRoutes:
    """Handlers reading `store` (off the event loop, see `ResultStore`); `health` says whether the
    consumer is running (and the retention task); `tenants` says who is calling."""

    def __init__(
        self,
        store: ResultStore,
        health: Callable[[], Health],
        *,
        tenants: TenantRegistry,
        metrics: ReadMetrics,
    ) -> None:
        self._store = store
        self._health = health
        self._tenants = tenants
        self._metrics = metrics

    async def get_result(self, request: Request) -> Response:
        """200 with `public_view` of the caller's first result for the id; 401 without a valid key;
        403 for a ``?tenant=`` that is not the key's; 404 while there is none (or past retention, or
        it is another tenant's); 422 for an id no request can have, which is not echoed back."""
        try:
            principal = self._tenants.authenticate(request.headers.getlist("authorization"))
        except AuthenticationError as exc:
            self._metrics.refused(f"unauthenticated_{exc.reason}")
            challenge = 'Bearer realm="inferq"' + (
                "" if exc.reason == "missing" else ', error="invalid_token"'
            )
            return JSONResponse({"error": str(exc)}, status_code=401, headers={"WWW-Authenticate": challenge})
        label = principal.label
        tenant = principal.name
        named = request.query_params.getlist("tenant")
        if named:
            if len(named) > 1 or len(named[0]) > MAX_TENANT_CHARS or not ID_PATTERN.fullmatch(named[0]):
                self._metrics.refused("invalid", label)
                return JSONResponse({"error": _BAD_TENANT}, status_code=422)
            if principal.authenticated and named[0] != principal.name:
                self._metrics.refused("not_entitled", label)
                error = f"this key belongs to tenant {principal.name!r}; leave tenant out or send that"
                return JSONResponse({"error": error}, status_code=403)
            tenant = named[0]
        request_id = request.path_params["request_id"]
        if not isinstance(request_id, str) or not ID_PATTERN.fullmatch(request_id):
            self._metrics.refused("invalid", label)
            return JSONResponse({"error": _BAD_ID}, status_code=422)
        result = await self._store.get(tenant, request_id)
        self._metrics.read(label, found=result is not None)
        if result is None:
            return JSONResponse({"error": f"no result for request_id {request_id!r} (yet)"}, status_code=404)
        return JSONResponse(public_view(result))

    async def healthz(self, _: Request) -> Response:
        """200 "ok" once consuming ("starting" before); 503 when the consumer or the retention task
        has stopped. With how many results are stored."""
        health = self._health()
        body = {"status": health.status, "results": await self._store.count()}
        return JSONResponse(body, status_code=200 if health.healthy else 503)
