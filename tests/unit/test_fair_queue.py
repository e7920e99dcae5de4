"""Fair share within a tier: the read-ahead serves tenants by weight, skips a tenant at its
concurrency cap, and still expires and promotes (``fair_queue.py``, ``readahead.py``)."""

from __future__ import annotations

from collections import Counter

import pytest

from inferq.dispatcher.fair_queue import FairQueue
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.policies import TieredScheduler
from inferq.dispatcher.readahead import TOO_LATE, ReadAhead
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier
from tests.support.work import a_work

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
FAR = 10**12


class Limits:
    def __init__(self, weights: dict[str, float], caps: dict[str, int] | None = None) -> None:
        self.weights = weights
        self.caps = caps or {}

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)

    def max_concurrency(self, tenant: str) -> int | None:
        return self.caps.get(tenant)


_offsets = PartitionOffsets("t.low", 0)


def work(tenant: str, n: int, tier: Tier = L, created: int | None = None, expire: int = FAR) -> Work:
    return a_work(
        tier,
        n,
        offsets=_offsets,
        request_id=f"{tenant}-{n}",
        scenario="brief",
        created_at_ms=n if created is None else created,
        expire_at_ms=expire,
        tenant=tenant,
    )


def drain(queue: FairQueue, count: int) -> list[str]:
    order = []
    for _ in range(count):
        popped = queue.pop(lambda _: True)
        assert popped is not None
        order.append(popped.request.tenant)
    return order


def test_one_tenant_is_served_in_arrival_order():
    q = FairQueue(lambda _: 1.0)
    for n in range(5):
        q.append(work("a", n))
    assert [q.pop(lambda _: True).offset for _ in range(5)] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]
    assert q.pop(lambda _: True) is None


@pytest.mark.parametrize(("wa", "wb"), [(1.0, 1.0), (3.0, 1.0), (1.0, 4.0), (0.5, 2.5)])
def test_backlogged_tenants_share_starts_by_weight(wa: float, wb: float):
    q = FairQueue(Limits({"a": wa, "b": wb}).weight)
    for n in range(1_000):
        q.append(work("a", n))
        q.append(work("b", n))
    served = Counter(drain(q, 500))
    expected_b = 500 * wb / (wa + wb)
    assert abs(served["b"] - expected_b) <= 1
    assert served["a"] + served["b"] == 500


@pytest.mark.parametrize(("wa", "wb"), [(1.0, 1.0), (4.0, 1.0), (1.0, 1.0 / 3)])
def test_a_flood_delays_a_small_tenant_by_its_weighted_share_only(wa: float, wb: float):
    """A queued 10,000 requests first; B's 10, arriving after, start within their weighted share of
    the tier's starts (10 x (1 + wA/wB), plus one for the start under way), not after A's backlog."""
    q = FairQueue(Limits({"a": wa, "b": wb}).weight)
    for n in range(10_000):
        q.append(work("a", n))
    drain(q, 37)  # A alone for a while: it must not matter how long
    for n in range(10):
        q.append(work("b", 20_000 + n))
    order = drain(q, 10_000 + 10 - 37)
    last_b = max(i for i, tenant in enumerate(order) if tenant == "b") + 1
    assert last_b <= 10 * (1 + wa / wb) + 1
    assert order.count("b") == 10 and len(q) == 0


def test_an_idle_tenant_gets_no_credit_for_its_idle_time():
    q = FairQueue(lambda _: 1.0)
    for n in range(200):
        q.append(work("a", n))
    drain(q, 100)  # B was idle all along
    for n in range(50):
        q.append(work("b", 1_000 + n))
    # From now on the two alternate: B does not catch up on the 100 starts it never asked for.
    assert Counter(drain(q, 20)) == {"a": 10, "b": 10}


def test_a_reloaded_weight_applies_at_the_next_start():
    weights = {"a": 1.0, "b": 1.0}
    q = FairQueue(Limits(weights).weight)
    for n in range(400):
        q.append(work("a", n))
        q.append(work("b", n))
    drain(q, 10)
    weights["a"] = 3.0
    served = Counter(drain(q, 200))
    assert abs(served["a"] - 150) <= 2


def readahead(limits: Limits, **kw: int) -> ReadAhead:
    return ReadAhead(promotion_age_ms=kw.pop("promotion_age_ms", 60_000), tenants=limits)


def test_a_tenant_at_its_cap_is_skipped_for_the_others_of_its_tier():
    r = readahead(Limits({}, caps={"a": 2}))
    for n in range(10):
        r.add(work("a", n))
    for n in range(3):
        r.add(work("b", 100 + n))
    nxt = NextStart(r, TieredScheduler(Schedule.default(budget=10).pin("night")))
    started = []
    for _ in range(5):
        start = nxt.take(L, now_ms=0)
        assert start is not None and start.expired is None
        started.append(start.work)
    # A had 2 calls running after its first two starts: B's three went next, then nothing startable.
    assert [w.request.tenant for w in started] == ["a", "b", "a", "b", "b"]
    assert r.demand().waiting[L] == 0  # A's 8 wait, but none may start: no demand
    assert nxt.tier({H: 0, M: 0, L: 5}, budget=10) is None
    assert nxt.take(L, now_ms=0) is None
    nxt.ended(started[0])  # one of A's calls gave its token back
    assert r.demand().waiting[L] == 8
    again = nxt.take(L, now_ms=0)
    assert again is not None and again.work.request.tenant == "a"


def test_an_expired_take_does_not_count_against_the_cap():
    r = readahead(Limits({}, caps={"a": 1}))
    r.add(work("a", 0, expire=5))
    r.add(work("a", 1))
    nxt = NextStart(r, TieredScheduler(Schedule.default(budget=10).pin("night")))
    first = nxt.take(L, now_ms=10)
    assert first is not None and first.expired == TOO_LATE
    second = nxt.take(L, now_ms=10)
    assert second is not None and second.expired is None


def test_expiry_and_aging_still_work_with_several_tenants():
    r = readahead(Limits({"a": 1.0, "b": 1.0}), promotion_age_ms=1_000)
    r.add(work("a", 1, created=0, expire=500))  # expires
    r.add(work("a", 2, created=0))  # starved: promoted
    r.add(work("b", 3, created=900))  # young: stays LOW
    r.add(work("b", 4, tier=M, created=800))
    expired, promoted = r.sweep(now_ms=1_000)
    assert [e.work.offset for e in expired] == [1]
    assert promoted == 1
    assert r.demand().waiting == {H: 0, M: 2, L: 1}
    assert r.held(L) == 2 and r.held_by(L, "a") == 1 and r.held_by(L, "b") == 1
    medium = [r.pop(M), r.pop(M)]
    assert sorted((w.offset, w.promoted) for w in medium if w is not None) == [(2, True), (4, False)]


def test_promoted_requests_go_first_in_their_tenants_medium_queue():
    r = readahead(Limits({}), promotion_age_ms=1_000)
    r.add(work("a", 1, tier=M, created=500))
    r.add(work("a", 2, created=0))
    r.sweep(now_ms=1_000)
    first = r.pop(M)
    assert first is not None and first.offset == 2 and first.promoted
