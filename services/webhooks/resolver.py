"""The callbacks' own resolver: a callback host's lookup never waits on, nor fills, a shared pool.

`getaddrinfo` blocks a thread for as long as the tenant's DNS takes to answer. Run in the event
loop's default executor, a slow resolver for one tenant's host would hold threads every other
lookup, every other tenant's submission and the tenants-file reload (``asyncio.to_thread``) wait
for. So the lookups run here, on a small pool of their own (`threads`), and each tenant may have
at most its `dns_lookups` (`inferq.tenancy.held.HeldLimits`) of them in flight in this process:
one more is refused at once (`LookupsBusyError`: 429 at submission, a retry later at delivery).

A lookup counts as in flight from its start until its thread is done with it, not until its caller
stopped waiting: the caller's wait is bounded (`AddressGuard`'s ``resolve_timeout_s``; then "host
did not resolve in time"), but a thread stuck in `getaddrinfo` cannot be interrupted, so a tenant
whose DNS hangs holds at most `dns_lookups` of the pool's threads and then gets refusals. A lookup
still queued when its caller gives up is cancelled and never runs.

Whose lookup it is comes with the call (`lookup_owner`, a context variable: the sender sets it for
each delivery, since aiohttp's resolver interface carries no tenant; ingest's callback check sets it
for each submission). A lookup with no owner counts under no tenant's limit (it is still bounded by
the pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import ipaddress
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from inferq.webhooks.errors import LookupsBusyError
from inferq.webhooks.urls import IPAddress

# What a thread runs: host, port -> getaddrinfo's answers (tests inject a slow one).
Lookup = Callable[[str, int], Sequence[tuple[Any, ...]]]
# Told of each refusal: (tenant, reason) -> None (the metric).
OnRefused = Callable[[str, str], None]

# A refused lookup is worth trying again about this much later (a lookup takes well under it).
RETRY_AFTER_S = 1


@dataclass(frozen=True)
class LookupOwner:
    """The tenant a lookup is made for, and how many of its lookups may be in flight at once."""

    tenant: str
    max_in_flight: int


lookup_owner: contextvars.ContextVar[LookupOwner | None] = contextvars.ContextVar(
    "inferq_callback_lookup_owner", default=None
)


@contextlib.contextmanager
def looking_up_for(owner: LookupOwner) -> Iterator[None]:
    """Lookups made inside (and in tasks started inside) count under `owner`'s limit."""
    token = lookup_owner.set(owner)
    try:
        yield
    finally:
        lookup_owner.reset(token)


def system_lookup(host: str, port: int) -> Sequence[tuple[Any, ...]]:
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


class CallbackResolver:
    """Resolves callback hosts on `threads` threads of its own, each tenant bounded by its
    `LookupOwner.max_in_flight`. Callable as the guard's `Resolve` (host, port). `close()` ends
    the pool (a thread stuck in a lookup is not waited for); a later lookup starts a new one."""

    def __init__(
        self,
        *,
        threads: int,
        lookup: Lookup = system_lookup,
        on_refused: OnRefused | None = None,
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._threads = threads
        # Made on first use (and again after `close`: a service started a second time in one process).
        self._executor: ThreadPoolExecutor | None = None
        self._lookup = lookup
        self._on_refused = on_refused or (lambda tenant, reason: None)
        # Released from the worker thread when a lookup ends: a lock, not the loop.
        self._lock = threading.Lock()
        self._in_flight: Counter[str] = Counter()

    def in_flight(self, tenant: str) -> int:
        """The tenant's lookups started and not yet ended (their threads' view)."""
        with self._lock:
            return self._in_flight[tenant]

    async def __call__(self, host: str, port: int) -> Sequence[IPAddress]:
        owner = lookup_owner.get()
        if owner is not None:
            self._take(owner)
        try:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._threads, thread_name_prefix="inferq-callback-dns"
                )
            future = self._executor.submit(self._lookup, host, port)
        except BaseException:
            if owner is not None:
                self._release(owner.tenant)
            raise
        if owner is not None:
            # Runs when the thread is done (or the queued lookup was cancelled), however long after
            # the caller stopped waiting.
            future.add_done_callback(lambda _: self._release(owner.tenant))
        # Cancelling this wait (the caller's timeout) cancels the lookup if it has not started yet.
        infos = await asyncio.wrap_future(future)
        return _addresses(infos)

    def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def _take(self, owner: LookupOwner) -> None:
        with self._lock:
            busy = self._in_flight[owner.tenant] >= owner.max_in_flight
            if not busy:
                self._in_flight[owner.tenant] += 1
        if busy:
            self._on_refused(owner.tenant, "dns_limit")
            raise LookupsBusyError(owner.tenant, owner.max_in_flight, RETRY_AFTER_S)

    def _release(self, tenant: str) -> None:
        with self._lock:
            self._in_flight[tenant] -= 1
            if self._in_flight[tenant] <= 0:
                del self._in_flight[tenant]


def _addresses(infos: Sequence[tuple[Any, ...]]) -> list[IPAddress]:
    """getaddrinfo's answers as addresses, each once, in its order (a scope id dropped)."""
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if ip not in addresses:
            addresses.append(ip)
    return addresses
