"""`inferq report --tenant`: one tenant's part of a run (pure).

A result carries its request's tenant, so a run's outcomes are split by it; every figure of the
report (waits, outcomes by status, tokens in use, utilization of the budget) is then that tenant's.
A tenant name is checked against the identifier rule every record obeys (`inferq.messaging.limits`)
before anything is read: a name no record can carry is a mistake, not an empty report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from inferq.messaging import limits
from inferq.tools.measures import MeasuredRequest
from inferq.tools.report.documents import RunDocument


def check_tenant(name: str) -> str:
    """`name` if a record's tenant can be it; ValueError naming the rule otherwise."""
    if len(name) > limits.MAX_TENANT_CHARS or not limits.ID_PATTERN.fullmatch(name):
        shown = name if len(name) <= limits.MAX_TENANT_CHARS else name[: limits.MAX_TENANT_CHARS] + "..."
        raise ValueError(
            f"a tenant is 1-{limits.MAX_TENANT_CHARS} letters, digits, '.', '_', ':' or '-', got {shown!r}"
        )
    return name


def tenant_counts(outcomes: Iterable[MeasuredRequest]) -> dict[str, int]:
    """Outcomes per tenant, the busiest first (then by name)."""
    counts = Counter(o.tenant for o in outcomes)
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def describe_tenants(counts: dict[str, int], *, limit: int = 10) -> str:
    """`a 120, b 40` (the `limit` busiest, then how many more)."""
    shown = [f"{tenant} {n}" for tenant, n in list(counts.items())[:limit]]
    more = len(counts) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def of_tenant(outcomes: Sequence[MeasuredRequest], tenant: str) -> list[MeasuredRequest]:
    return [o for o in outcomes if o.tenant == tenant]


def document_of_tenant(doc: RunDocument, tenant: str) -> RunDocument:
    """`doc` narrowed to `tenant`'s outcomes. A document's request counts are not split by tenant,
    so they are dropped (a recorded run's are recounted from its request records instead)."""
    return RunDocument(
        kind=doc.kind,
        name=doc.name,
        budget=doc.budget,
        outcomes=of_tenant(doc.outcomes, tenant),
        requests=None,
        params={**doc.params, "tenant": tenant},
    )
