"""The callbacks' own resolver: lookups run on its threads, never the event loop's default pool;
each tenant has at most its `dns_lookups` in flight (one more is refused at once: 429 at
submission, a retry at delivery) while other tenants' lookups go on; a lookup that hangs is cut
at the guard's bound ("host did not resolve in time") but counts until its thread is done."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from pydantic import SecretStr

from inferq.ingest.callbacks import CallbackCheck
from inferq.ingest.errors import CallbackLookupsBusyError
from inferq.ingest.submit import refusal_response
from inferq.tenancy.auth import Principal
from inferq.tenancy.held import HeldLimits
from inferq.tenancy.model import Entitlements, NameSet, Tenant
from inferq.webhooks.delivery import CheckedResolver
from inferq.webhooks.errors import CallbackRefusedError, LookupsBusyError
from inferq.webhooks.guard import AddressGuard
from inferq.webhooks.policy import CallbackPolicy
from inferq.webhooks.resolver import CallbackResolver, LookupOwner, looking_up_for, system_lookup
from inferq.webhooks.settings import WebhookSettings
from tests.support.loop import in_loop
from tests.support.waiting import eventually

SECRET = "whsec_cmVzb2x2ZXItdW5pdC0tLS0tLS0tLS0tLS0tLS0tLS0="  # noqa: S105 - a test secret
PUBLIC = "93.184.216.34"


class SlowDns:
    """A resolver's lookup: ``slow.example`` hangs until `release`d; any other name answers at once.
    Records the thread each lookup ran on."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.threads: list[str] = []
        self.hosts: list[str] = []

    def __call__(self, host: str, port: int) -> Sequence[tuple[Any, ...]]:
        self.threads.append(threading.current_thread().name)
        self.hosts.append(host)
        if host == "slow.example":
            self.gate.wait(30)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC, port))]

    def release(self) -> None:
        self.gate.set()


class RecordingExecutor(ThreadPoolExecutor):
    """Stands in for the loop's default executor: counts what is submitted to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=2)
        self.calls = 0

    def submit(self, fn, /, *args, **kwargs) -> Future[Any]:  # type: ignore[override]
        self.calls += 1
        return super().submit(fn, *args, **kwargs)


async def resolve_for(resolver: CallbackResolver, owner: LookupOwner | None, host: str) -> Sequence[Any]:
    if owner is None:
        return await resolver(host, 443)
    with looking_up_for(owner):
        return await resolver(host, 443)


@in_loop
async def test_past_its_dns_lookups_a_tenant_is_refused_at_once_and_another_tenant_is_not():
    dns, refused = SlowDns(), []
    resolver = CallbackResolver(threads=4, lookup=dns, on_refused=lambda t, r: refused.append((t, r)))
    acme = LookupOwner("acme", 2)
    try:
        hanging = [asyncio.create_task(resolve_for(resolver, acme, "slow.example")) for _ in range(2)]
        await eventually(lambda: resolver.in_flight("acme") == 2, "acme's two lookups started", 5)
        with pytest.raises(LookupsBusyError) as caught:
            await resolve_for(resolver, acme, "fast.example")
        assert not caught.value.permanent and caught.value.retry_after_s >= 1
        assert "dns_lookups" in caught.value.problem
        assert refused == [("acme", "dns_limit")]
        # Another tenant's lookup is answered while acme's hang.
        assert [str(ip) for ip in await resolve_for(resolver, LookupOwner("beta", 2), "fast.example")] == [
            PUBLIC
        ]
        dns.release()
        await asyncio.wait_for(asyncio.gather(*hanging), 5)
        assert resolver.in_flight("acme") == 0
        # Its lookups done, acme may look up again.
        assert await resolve_for(resolver, acme, "fast.example")
    finally:
        dns.release()
        resolver.close()


@in_loop
async def test_a_hanging_lookup_is_cut_at_the_bound_but_holds_the_tenants_count_until_its_thread_is_done():
    dns = SlowDns()
    resolver = CallbackResolver(threads=2, lookup=dns)
    guard = AddressGuard(resolve=resolver, resolve_timeout_s=0.05)
    acme = LookupOwner("acme", 1)
    try:
        with (
            looking_up_for(acme),
            pytest.raises(CallbackRefusedError, match="did not resolve in time") as caught,
        ):
            await guard.resolve_checked("slow.example", 443)
        assert not caught.value.permanent
        # The thread is still in getaddrinfo: acme's one lookup is still in flight.
        assert resolver.in_flight("acme") == 1
        with looking_up_for(acme), pytest.raises(LookupsBusyError):
            await guard.resolve_checked("fast.example", 443)
        dns.release()
        await eventually(lambda: resolver.in_flight("acme") == 0, "the hung lookup over", 5)
    finally:
        dns.release()
        resolver.close()


@in_loop
async def test_a_lookup_still_queued_when_its_caller_gives_up_never_runs_and_frees_its_count():
    dns = SlowDns()
    resolver = CallbackResolver(threads=1, lookup=dns)  # one thread, held by the first lookup
    guard = AddressGuard(resolve=resolver, resolve_timeout_s=0.05)
    try:
        first = asyncio.create_task(resolve_for(resolver, None, "slow.example"))
        await eventually(lambda: dns.hosts == ["slow.example"], "the first lookup running", 5)
        with looking_up_for(LookupOwner("acme", 1)), pytest.raises(CallbackRefusedError, match="in time"):
            await guard.resolve_checked("queued.example", 443)
        assert resolver.in_flight("acme") == 0
        dns.release()
        await asyncio.wait_for(first, 5)
        assert "queued.example" not in dns.hosts
    finally:
        dns.release()
        resolver.close()


@in_loop
async def test_lookups_never_use_the_event_loops_default_executor():
    default = RecordingExecutor()
    asyncio.get_running_loop().set_default_executor(default)
    names: list[str] = []

    def lookup(host: str, port: int) -> Sequence[tuple[Any, ...]]:
        names.append(threading.current_thread().name)
        return system_lookup(host, port)

    resolver = CallbackResolver(threads=2, lookup=lookup)
    try:
        found = await resolve_for(resolver, LookupOwner("acme", 1), "localhost")
        assert found and all(ip.is_loopback for ip in found)
        # A guard built without a resolver makes one of its own, not the default pool either.
        with pytest.raises(CallbackRefusedError, match="loopback"):
            await AddressGuard().resolve_checked("localhost", 443)
        assert default.calls == 0
        assert names and all(name.startswith("inferq-callback-dns") for name in names)
    finally:
        resolver.close()


@in_loop
async def test_at_delivery_a_busy_tenant_is_retried_not_refused_for_good():
    """aiohttp's resolver (the delivery's connect) goes through the same bound: the error is not
    permanent, which `WebhookPoster.post` answers with a retry."""
    dns = SlowDns()
    resolver = CallbackResolver(threads=2, lookup=dns)
    checked = CheckedResolver(AddressGuard(resolve=resolver))
    acme = LookupOwner("acme", 1)
    try:
        hanging = asyncio.create_task(resolve_for(resolver, acme, "slow.example"))
        await eventually(lambda: resolver.in_flight("acme") == 1, "acme's lookup started", 5)
        with looking_up_for(acme), pytest.raises(LookupsBusyError) as caught:
            await checked.resolve("hooks.example", 443)
        assert not caught.value.permanent
        dns.release()
        await asyncio.wait_for(hanging, 5)
    finally:
        dns.release()
        resolver.close()


# --- at submission ------------------------------------------------------------------------------


def a_principal(dns_lookups: int) -> Principal:
    tenant = Tenant(
        name="acme",
        key_digests=(),
        weight=1.0,
        entitlements=dataclasses.replace(
            Entitlements.unrestricted(), callback_hosts=NameSet.of(["slow.example", "fast.example"])
        ),
        webhook_secrets=(SecretStr(SECRET),),
        limits=HeldLimits(dns_lookups=dns_lookups),
    )
    return Principal(tenant, authenticated=True)


@in_loop
async def test_a_submission_past_the_tenants_dns_lookups_is_429_with_retry_after():
    dns = SlowDns()
    resolver = CallbackResolver(threads=4, lookup=dns)
    check = CallbackCheck(
        CallbackPolicy(WebhookSettings(), AddressGuard(resolve=resolver, resolve_timeout_s=10))
    )
    acme = a_principal(dns_lookups=1)
    try:
        first = asyncio.create_task(check.check("https://slow.example/hook", acme))
        await eventually(lambda: resolver.in_flight("acme") == 1, "the first check looking up", 5)
        with pytest.raises(CallbackLookupsBusyError) as caught:
            await check.check("https://fast.example/hook", acme)
        response = refusal_response(caught.value)
        assert response.status_code == 429 and response.headers["retry-after"] == "1"
        assert b'"quota":"dns_lookups"' in response.body
        dns.release()
        await asyncio.wait_for(first, 5)  # the first submission's callback passes
        await check.check("https://fast.example/hook", acme)  # and then the next one does
    finally:
        dns.release()
        resolver.close()
