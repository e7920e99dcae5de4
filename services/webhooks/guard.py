"""The SSRF guard: a webhook is never sent to an address inside the network inferq runs in.

Refused unless ``INFERQ_WEBHOOK_ALLOW_PRIVATE_ADDRESSES`` is set: loopback (127/8, ::1), private
(10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10), link-local (169.254/16, fe80::/10,
where cloud metadata services answer), multicast, unspecified (0.0.0.0, ::), and every other block
IANA marks as not globally reachable. An IPv6 address that embeds an IPv4 one is judged by that
one (IPv4-mapped ``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``, SIIT ``::ffff:0:0:0/96``, the
deprecated IPv4-compatible ``::/96``, 6to4, Teredo). Local-use NAT64 (``64:ff9b:1::/48``) and
site-local (``fec0::/10``) are refused whatever follows the prefix: the first is translated by a
gateway inside the network, where the IPv4 address sits depends on that gateway's prefix length;
the second is deprecated and means "this site". These four ranges are checked here by prefix, not
left to `ipaddress`, whose `is_private`/`is_global` lists differ between Python versions.

A host name is resolved and judged by every address it resolves to: one refused address refuses
the name (a name that mixes public and private answers is not to be trusted with either). The
same check runs at submission (422) and at delivery, where the connection is made only to the
addresses checked here (`inferq.webhooks.delivery`), so a DNS answer that changes between the
check and the connect (rebinding) gains nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable, Sequence

from inferq.webhooks.errors import CallbackRefusedError
from inferq.webhooks.resolver import CallbackResolver
from inferq.webhooks.urls import CallbackTarget, IPAddress

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# Refused by prefix alone, with what to call them.
_REFUSED_RANGES = (
    (ipaddress.IPv6Network("64:ff9b:1::/48"), "a local-use NAT64 address"),
    (ipaddress.IPv6Network("fec0::/10"), "a site-local address"),
)

# host, port -> the addresses it resolves to (getaddrinfo's answers).
Resolve = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
# The threads of a guard's own resolver when it was given none.
DEFAULT_THREADS = 4


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, NAT64, SIIT, IPv4-compatible, 6to4, Teredo
    client), else None. ``::`` and ``::1`` are IPv6's own unspecified and loopback addresses."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _NAT64 or ip in _SIIT or (ip in _IPV4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def address_problem(ip: IPAddress) -> str | None:
    """Why a webhook may not go to `ip` (its kind of address), or None for a public address."""
    inner = embedded_ipv4(ip)
    if inner is not None:
        problem = address_problem(inner)
        return None if problem is None else f"{problem} (inside an IPv6 address)"
    for network, kind in _REFUSED_RANGES:
        if ip in network:
            return kind
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip.is_private:
        return "a private address"
    if not ip.is_global:
        return "an address that is not globally reachable"
    return None


class AddressGuard:
    """Resolves a target's host and refuses what `address_problem` refuses (unless
    `allow_private`). `resolve` is the services' `CallbackResolver` (threads of its own, a
    per-tenant bound); without one, the guard makes a small one on first use. Tests inject a
    function (a name resolving to a private address)."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        resolve_timeout_s: float = 5.0,
        resolve: Resolve | None = None,
    ) -> None:
        self._allow_private = allow_private
        self._resolve_timeout_s = resolve_timeout_s
        self._resolve = resolve

    @property
    def allow_private(self) -> bool:
        return self._allow_private

    def check(self, ip: IPAddress) -> None:
        """`CallbackRefusedError` when `ip` may not be called."""
        problem = None if self._allow_private else address_problem(ip)
        if problem is not None:
            raise CallbackRefusedError(f"host is or resolves to {problem}")

    async def addresses(self, target: CallbackTarget) -> list[IPAddress]:
        """The addresses a delivery to `target` may connect to: its IP literal, or every address its
        host resolves to, each checked. `CallbackRefusedError` when one is refused (permanent), or
        when the name does not resolve in time (not permanent: DNS may come back)."""
        if target.ip is not None:
            self.check(target.ip)
            return [target.ip]
        return await self.resolve_checked(target.host, target.port)

    async def resolve_checked(self, host: str, port: int) -> list[IPAddress]:
        if self._resolve is None:
            # Never the loop's default executor (`inferq.webhooks.resolver`).
            self._resolve = CallbackResolver(threads=DEFAULT_THREADS)
        try:
            async with asyncio.timeout(self._resolve_timeout_s):
                found = list(await self._resolve(host, port))
        except TimeoutError:
            raise CallbackRefusedError(
                "host did not resolve in time (lookup timed out)", permanent=False
            ) from None
        except (OSError, UnicodeError):
            raise CallbackRefusedError("host does not resolve (lookup failed)", permanent=False) from None
        if not found:
            raise CallbackRefusedError("host does not resolve (no address)", permanent=False)
        for ip in found:
            self.check(ip)
        return found
