"""Which hosts a tenant's callbacks may name: its `callback_hosts` entitlement, or in open mode the
configured list (``INFERQ_CALLBACK_HOSTS``). An entry ``host`` allows that host on any port;
``host:port`` only on that port. Matching is exact (no wildcard subdomains): a tenant lists every
host it receives on. Only open mode's list may say ``*`` (any host the SSRF guard lets through)."""

from __future__ import annotations

from collections.abc import Iterable

from inferq.tenancy.model import NameSet
from inferq.webhooks.urls import CallbackTarget


def host_allowed(target: CallbackTarget, allowed: NameSet) -> bool:
    """Whether `allowed` lists the target's host (on any port) or its host:port."""
    if allowed.any:
        return True
    return target.host in allowed.names or f"{target.host}:{target.port}" in allowed.names


def open_mode_hosts(entries: Iterable[str]) -> NameSet:
    """Open mode's allow-list from the settings' entries (already lowercase)."""
    return NameSet.of(entries)
