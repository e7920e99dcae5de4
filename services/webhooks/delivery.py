"""One delivery attempt: a signed POST to a checked address, and what came of it.

aiohttp makes the call through a `CheckedResolver`: the host is resolved by the SSRF guard and the
connection goes only to the addresses the guard let through, with the URL's host in the Host
header and the TLS server name (SNI, certificate check). A name that resolved to a public address
at submission and to 127.0.0.1 now (DNS rebinding) is refused at this connect, not after it. An IP
literal is checked before the call. No redirect is followed (one could point anywhere), no proxy
from the environment is used, and every attempt is bounded (`timeout_s`, `connect_timeout_s`).

2xx: delivered. 410 Gone: the receiver wants no more (stop, no retry). Anything else, a timeout,
a refused connection or a name that does not resolve: try again later. An address the guard
refuses: refused for good.
"""

from __future__ import annotations

import enum
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult

from inferq.webhooks.errors import CallbackRefusedError
from inferq.webhooks.guard import AddressGuard
from inferq.webhooks.outbox import PendingDelivery
from inferq.webhooks.signing import ATTEMPT_HEADER, WebhookSecrets
from inferq.webhooks.urls import CallbackTarget

USER_AGENT = "inferq-webhooks/1"


class AttemptOutcome(enum.StrEnum):
    DELIVERED = "delivered"
    GONE = "gone"
    RETRY = "retry"
    REFUSED = "refused"


@dataclass(frozen=True)
class AttemptResult:
    """What one attempt came to; `detail` is short and names no secret ("HTTP 503", "timeout")."""

    outcome: AttemptOutcome
    detail: str
    # The metric's label: 2xx, 3xx, 4xx, 5xx, timeout, connection, refused.
    kind: str


class CheckedResolver(AbstractResolver):
    """aiohttp's resolver: only the addresses `guard` checked, so what is connected to is what was checked."""

    def __init__(self, guard: AddressGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await self._guard.resolve_checked(host, port)
        return [
            ResolveResult(
                hostname=host,
                host=str(ip),
                port=port,
                family=socket.AF_INET6 if ip.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in addresses
        ]

    async def close(self) -> None:
        return None


class WebhookPoster:
    """POSTs deliveries through one aiohttp session (started and closed with the results service)."""

    def __init__(self, guard: AddressGuard, *, timeout_s: float, connect_timeout_s: float) -> None:
        self._guard = guard
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, connect=connect_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=CheckedResolver(self._guard),
                # Every new connection asks the guard: a cached answer would skip the check.
                use_dns_cache=False,
                limit=100,
            )
            # trust_env=False: no HTTP(S)_PROXY from the environment (a proxy would make the connect,
            # to wherever the name resolves for it).
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout, trust_env=False)

    async def stop(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def post(
        self,
        target: CallbackTarget,
        delivery: PendingDelivery,
        *,
        secret: WebhookSecrets,
        attempt: int,
        now_s: int,
    ) -> AttemptResult:
        """One attempt of `delivery` to `target` (already through the policy's form and host rules),
        signed with every key of `secret`; never raises for what the receiver or the network does."""
        if self._session is None:
            raise RuntimeError("the webhook poster is not started")
        try:
            _check_same_host(target)
            if target.ip is not None:
                self._guard.check(target.ip)
            headers = {
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
                **secret.headers(delivery.delivery_id, now_s, delivery.body),
                ATTEMPT_HEADER: str(attempt),
            }
            async with self._session.post(
                target.url, data=delivery.body, headers=headers, allow_redirects=False
            ) as response:
                return _from_status(response.status)
        except CallbackRefusedError as exc:
            if exc.permanent:
                return AttemptResult(AttemptOutcome.REFUSED, exc.problem, "refused")
            return AttemptResult(AttemptOutcome.RETRY, exc.problem, "connection")
        except TimeoutError:  # asyncio.TimeoutError is this one since 3.11
            return AttemptResult(AttemptOutcome.RETRY, "timeout", "timeout")
        except aiohttp.ClientError as exc:
            return AttemptResult(AttemptOutcome.RETRY, f"connection failed ({_kind(exc)})", "connection")


def _check_same_host(target: CallbackTarget) -> None:
    """The HTTP client must call the very host the rules checked: refuse a URL it reads otherwise."""
    host = yarl.URL(target.url).host or ""
    if target.ip is not None:
        try:
            same = ipaddress.ip_address(host.strip("[]")) == target.ip
        except ValueError:
            same = False
    else:
        same = host.lower() == target.host
    if not same:
        raise CallbackRefusedError("the URL's host reads differently to the HTTP client")


def _from_status(status: int) -> AttemptResult:
    kind = f"{status // 100}xx"
    if 200 <= status < 300:
        return AttemptResult(AttemptOutcome.DELIVERED, f"HTTP {status}", kind)
    if status == 410:
        return AttemptResult(AttemptOutcome.GONE, "HTTP 410 Gone: the receiver wants no more", kind)
    if 300 <= status < 400:
        return AttemptResult(AttemptOutcome.RETRY, f"HTTP {status} (redirects are not followed)", kind)
    return AttemptResult(AttemptOutcome.RETRY, f"HTTP {status}", kind)


def _kind(exc: Any) -> str:
    # The exception's text may quote the URL (a token in its query): its kind is enough.
    cause = exc.__cause__ or getattr(exc, "os_error", None)
    return type(cause).__name__ if isinstance(cause, BaseException) else type(exc).__name__
