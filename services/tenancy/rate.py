"""Requests per minute per tenant: one token bucket each, on an injected monotonic clock.

A tenant with `requests_per_minute` R and `burst` B holds at most B tokens, gains R / 60 a second
and spends one per request; with none left it is refused, and told when the next token comes
(`Retry-After`, that tenant's own). After an idle spell a tenant can send B at once, then R a
minute. Tenants without a rate are never limited.

The quota is ingest's `requests_per_minute` (with its `burst`) by default; the results service
counts `limits.reads_per_minute` with the same buckets (`RateLimiter.reads`: a minute's worth at
once). `configure` takes a new directory's limits (a reload): a tenant whose rate did not change
keeps its bucket, a changed one starts full at its new burst, a removed one is forgotten. Pure
bookkeeping, single-threaded (the service's event loop); no sleeping, no task.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from inferq.tenancy.model import Tenant

# A tenant's quota: (per minute, burst), or None when it has none.
QuotaOf = Callable[[Tenant], tuple[int, int] | None]


def requests_quota(tenant: Tenant) -> tuple[int, int] | None:
    """Ingest's quota: the tenant's `requests_per_minute` and `burst`, when it has a rate."""
    rate, burst = tenant.requests_per_minute, tenant.rate_burst
    return None if rate is None or burst is None else (rate, burst)


def reads_quota(tenant: Tenant) -> tuple[int, int]:
    """The results service's quota: `limits.reads_per_minute`, a minute's worth at once."""
    return (tenant.limits.reads_per_minute, tenant.limits.reads_per_minute)


@dataclass
class _Bucket:
    per_minute: int
    burst: int
    tokens: float
    updated_s: float

    def refill(self, now_s: float) -> None:
        elapsed = max(0.0, now_s - self.updated_s)
        self.tokens = min(float(self.burst), self.tokens + elapsed * self.per_minute / 60.0)
        self.updated_s = now_s


@dataclass(frozen=True)
class RateRefusal:
    """A tenant out of tokens: its rate and the whole seconds until it has one again (>= 1);
    `quota` names the rate (``requests_per_minute``, ``reads_per_minute``)."""

    tenant: str
    requests_per_minute: int
    burst: int
    retry_after_s: int
    quota: str = "requests_per_minute"


class RateLimiter:
    """Token buckets of the tenants that have a rate; `take(name)` spends one or refuses. `quota`
    reads a tenant's rate (default ingest's), `quota_name` names it in refusals."""

    def __init__(
        self,
        clock_s: Callable[[], float],
        *,
        quota: QuotaOf = requests_quota,
        quota_name: str = "requests_per_minute",
    ) -> None:
        self._clock_s = clock_s
        self._quota = quota
        self._quota_name = quota_name
        self._buckets: dict[str, _Bucket] = {}

    @classmethod
    def reads(cls, clock_s: Callable[[], float]) -> RateLimiter:
        """The results service's limiter: `limits.reads_per_minute` per tenant."""
        return cls(clock_s, quota=reads_quota, quota_name="reads_per_minute")

    def configure(self, tenants: Iterable[Tenant]) -> None:
        now_s = self._clock_s()
        buckets: dict[str, _Bucket] = {}
        for tenant in tenants:
            quota = self._quota(tenant)
            if quota is None:
                continue
            rate, burst = quota
            kept = self._buckets.get(tenant.name)
            if kept is not None and (kept.per_minute, kept.burst) == (rate, burst):
                buckets[tenant.name] = kept
            else:
                buckets[tenant.name] = _Bucket(rate, burst, float(burst), now_s)
        self._buckets = buckets

    def take(self, tenant: str) -> RateRefusal | None:
        """Spend one of `tenant`'s tokens (None), or say when it will have one (`RateRefusal`)."""
        bucket = self._buckets.get(tenant)
        if bucket is None:
            return None
        bucket.refill(self._clock_s())
        # The epsilon absorbs float drift: R/60 a second for 60/R seconds must make a whole token.
        if bucket.tokens >= 1.0 - 1e-9:
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
            return None
        wait_s = (1.0 - bucket.tokens) * 60.0 / bucket.per_minute
        retry_after_s = max(1, math.ceil(wait_s))
        return RateRefusal(tenant, bucket.per_minute, bucket.burst, retry_after_s, self._quota_name)

    def tokens(self, tenant: str) -> float | None:
        """What `tenant` has left now (None: not limited)."""
        bucket = self._buckets.get(tenant)
        if bucket is None:
            return None
        bucket.refill(self._clock_s())
        return bucket.tokens
