"""Requests per minute per tenant: token buckets on a fake clock."""

from __future__ import annotations

from inferq.messaging.tiers import Tier
from inferq.tenancy.model import Entitlements, NameSet, Tenant
from inferq.tenancy.rate import RateLimiter
from tests.support.clock import ManualClock

ANYTHING = Entitlements(max_tier=Tier.HIGH, scenarios=NameSet.everything())


def tenant(name: str, rpm: int | None, burst: int | None = None) -> Tenant:
    return Tenant(name, (), 1.0, ANYTHING, requests_per_minute=rpm, burst=burst)


def test_a_burst_then_the_rate_then_a_refusal_that_says_when():
    clock = ManualClock(now_s=100.0)
    limiter = RateLimiter(clock.seconds)
    limiter.configure([tenant("a", 60, burst=3)])
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    refused = limiter.take("a")
    assert refused is not None
    assert (refused.tenant, refused.requests_per_minute, refused.burst, refused.retry_after_s) == (
        "a",
        60,
        3,
        1,
    )
    clock.advance(s=1.0)  # 60 a minute: one token a second
    assert limiter.take("a") is None
    assert limiter.take("a") is not None
    clock.advance(s=3600)
    assert limiter.tokens("a") == 3.0  # never more than the burst


def test_retry_after_is_the_wait_for_one_token_rounded_up():
    clock = ManualClock(now_s=100.0)
    limiter = RateLimiter(clock.seconds)
    limiter.configure([tenant("slow", 2)])  # a token every 30 s, burst 2
    assert limiter.take("slow") is None and limiter.take("slow") is None
    refused = limiter.take("slow")
    assert refused is not None and refused.retry_after_s == 30
    clock.advance(s=29.5)
    assert limiter.take("slow").retry_after_s == 1  # type: ignore[union-attr]
    clock.advance(s=0.5)
    assert limiter.take("slow") is None


def test_one_tenant_out_of_tokens_leaves_the_others_alone_and_unlimited_tenants_are_never_refused():
    limiter = RateLimiter(ManualClock(now_s=100.0).seconds)
    limiter.configure([tenant("busy", 1), tenant("calm", 1), tenant("free", None)])
    assert limiter.take("busy") is None and limiter.take("busy") is not None
    assert limiter.take("calm") is None
    assert all(limiter.take("free") is None for _ in range(1_000))
    assert limiter.take("not-in-the-file") is None and limiter.tokens("free") is None


def test_a_reload_keeps_unchanged_buckets_resets_changed_ones_and_forgets_removed_ones():
    limiter = RateLimiter(ManualClock(now_s=100.0).seconds)
    limiter.configure([tenant("same", 1), tenant("changed", 1), tenant("gone", 1)])
    for name in ("same", "changed", "gone"):
        assert limiter.take(name) is None
    limiter.configure([tenant("same", 1), tenant("changed", 5)])
    assert limiter.take("same") is not None  # still spent: a reload is no way around the rate
    assert limiter.tokens("changed") == 5.0
    assert limiter.tokens("gone") is None
