"""The tenants file's reloads as a metric, so a refused or broken file shows on a dashboard and not
only in a log line.

- `inferq_tenants_reloads_total{outcome}`: reloads of this process's registry since start;
  ``applied`` (new tenants in force), ``invalid`` (unreadable, or not a valid tenants file) and
  ``refused`` (valid, but removing every tenant or more than ``INFERQ_TENANTS_MAX_REMOVED_SHARE``);
  the last two kept the previous tenants in force.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

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
