"""Every authenticated request in progress holds one of its tenant's `connections`: an ASGI wrapper.

`HeldConnections` wraps a service's app. A request under the API prefix (``/v1/``) whose key names
a tenant (or any request in open mode: open mode's tenant) takes a lease of ``connections`` for as
long as the app answers it, streamed answers included, and gives it back however the request ended
(answered, failed, cancelled, the client gone). Past the tenant's limit the request is answered
429 with Retry-After by `refuse` (each API its own error shape) before the app sees it, with
``Connection: close``, so the refused caller's socket does not linger in the server's shared
connection limit either. A request without a valid key passes through: the app answers it 401 at
once, without holding anything. Health, readiness and metrics are not counted.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from inferq.tenancy.errors import AuthenticationError
from inferq.tenancy.holds import HeldResources, HoldRefusal
from inferq.tenancy.model import Tenant
from inferq.tenancy.registry import TenantRegistry

API_PREFIX = "/v1/"


def native_refusal(_: str, refusal: HoldRefusal) -> Response:
    """The native API's 429: the refusal's body (`HoldRefusal.body`) and Retry-After."""
    return JSONResponse(refusal.body(), status_code=429, headers=refusal.headers())


class HeldConnections:
    """`app` with each tenant's requests in progress bounded by its ``limits.connections``.
    `refuse(path, refusal)` makes the 429 for the request's path."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        registry: TenantRegistry,
        holds: HeldResources,
        refuse: Callable[[str, HoldRefusal], Response] = native_refusal,
        prefix: str = API_PREFIX,
    ) -> None:
        self._app = app
        self._registry = registry
        self._holds = holds
        self._refuse = refuse
        self._prefix = prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tenant = self._tenant(scope)
        if tenant is None:
            await self._app(scope, receive, send)
            return
        lease = self._holds.acquire(tenant, "connections")
        if isinstance(lease, HoldRefusal):
            response = self._refuse(scope["path"], lease)
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        with lease:
            await self._app(scope, receive, send)

    def _tenant(self, scope: Scope) -> Tenant | None:
        """The tenant a counted request belongs to; None for one not counted (not HTTP, outside the
        API, or without a valid key: the app answers it)."""
        if scope["type"] != "http" or not str(scope["path"]).startswith(self._prefix):
            return None
        try:
            principal = self._registry.authenticate(Headers(scope=scope).getlist("authorization"))
        except AuthenticationError:
            return None
        return principal.tenant
