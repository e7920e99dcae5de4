"""Tenancy as metrics, for every service that serves tenants (ingest and results alike): the tenants
file's reloads, so a refused or broken file shows on a dashboard and not only in a log line, and
what each tenant holds (`inferq.tenancy.holds`), so a tenant at its limits shows before it complains.

- `inferq_tenants_reloads_total{outcome}`: reloads of this process's registry since start;
  ``applied`` (new tenants in force), ``invalid`` (unreadable, or not a valid tenants file) and
  ``refused`` (valid, but removing every tenant or more than ``INFERQ_TENANTS_MAX_REMOVED_SHARE``);
  the last two kept the previous tenants in force.
- `inferq_held{tenant, kind}`: resources each tenant holds now in this process (``connections``,
  ``event_streams``, ``long_polls``, ``streamed_chats``, ``held_calls``)
- `inferq_held_refused_total{tenant, kind}`: requests refused 429 because the tenant held its limit
  of that kind

`tenant` is the registry's `label` (a name from the file, ``default`` in open mode, ``other`` for a
tenant since removed), so the label set stays bounded by the file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from inferq.tenancy.holds import HeldKind, HeldResources
from inferq.tenancy.registry import TenantRegistry


def watch_reloads(meter: Meter, registry: TenantRegistry) -> None:
    """Report `registry`'s reload counts on `meter` at each collection (nothing in open mode)."""
    if registry.open_mode:
        return

    def observe(_: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(registry.reloads, {"outcome": "applied"}),
            Observation(registry.failed_reloads, {"outcome": "invalid"}),
            Observation(registry.refused_reloads, {"outcome": "refused"}),
        ]

    meter.create_observable_counter(
        "inferq_tenants_reloads_total",
        [observe],
        description="tenants file reloads by outcome: applied, invalid or refused (the last two keep "
        "the previous tenants)",
    )


def watch_holds(meter: Meter, holds: HeldResources, registry: TenantRegistry) -> None:
    """Report what `holds` counts on `meter` at each collection, one series per tenant label and
    kind (tenants the file no longer lists add up under ``other``)."""

    def by_label(counts: Mapping[tuple[str, HeldKind], int]) -> list[Observation]:
        summed: Counter[tuple[str, str]] = Counter()
        for (tenant, kind), n in counts.items():
            summed[(registry.label(tenant), kind)] += n
        return [Observation(n, {"tenant": label, "kind": kind}) for (label, kind), n in summed.items()]

    meter.create_observable_gauge(
        "inferq_held",
        [lambda _: by_label(holds.in_use_counts())],
        description="resources each tenant holds now, by kind (connections, event_streams, long_polls, "
        "streamed_chats, held_calls)",
    )
    meter.create_observable_counter(
        "inferq_held_refused_total",
        [lambda _: by_label(holds.refused_counts())],
        description="requests refused 429 because the tenant held its limit of that kind",
    )
