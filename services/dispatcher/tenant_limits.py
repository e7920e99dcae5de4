"""What the dispatcher's scheduling reads of a tenant: its weight and its concurrency cap.

`TenantLimits` is the read side the read-ahead and its tenants' shares use; `EqualTenants`
(every tenant weight 1, no cap) is open mode's, the simulator's and most tests'. `RegistryLimits`
reads the tenants in force from a `TenantRegistry`, so a reload applies at the next decision.

A tenant the file does not list (removed while its requests were queued, see ``tenant_check.py``)
weighs 1 and has no cap of its own: its remaining requests finish at an ordinary share.
"""

from __future__ import annotations

from typing import Protocol

from inferq.tenancy.registry import TenantRegistry

DEFAULT_WEIGHT = 1.0


class TenantLimits(Protocol):
    def weight(self, tenant: str) -> float:
        """The tenant's share of a tier relative to the others (> 0)."""
        ...

    def max_concurrency(self, tenant: str) -> int | None:
        """The most backend calls the tenant may have running at once; None: no cap of its own."""
        ...


class EqualTenants:
    def weight(self, tenant: str) -> float:
        return DEFAULT_WEIGHT

    def max_concurrency(self, tenant: str) -> int | None:
        return None


class RegistryLimits:
    def __init__(self, registry: TenantRegistry) -> None:
        self._registry = registry

    def weight(self, tenant: str) -> float:
        found = self._registry.tenant(tenant)
        return found.weight if found is not None else DEFAULT_WEIGHT

    def max_concurrency(self, tenant: str) -> int | None:
        found = self._registry.tenant(tenant)
        return found.max_concurrency if found is not None else None
