from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.readahead import TOO_LATE, WOULD_BE_LATE, ReadAhead
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier
from tests.support.work import a_work

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW


def work(tier: Tier, created: int, expire: int, partition: int = 0, offset: int = 0) -> Work:
    where = PartitionOffsets(f"t.{tier}", partition)
    rid = f"{tier}-{created}-{offset}"
    return a_work(tier, offset, offsets=where, request_id=rid, created_at_ms=created, expire_at_ms=expire)


def readahead(**kw) -> ReadAhead:
    return ReadAhead(promotion_age_ms=kw.pop("promotion_age_ms", 60_000), **kw)


def test_expired_and_doomed_requests_are_swept_without_a_token():
    r = readahead(early_drop_ms={H: 500})
    r.add(work(H, 0, expire=1_000))  # expired at 1000
    r.add(work(H, 0, expire=1_300))  # 300 ms left, chat takes 500: doomed
    r.add(work(H, 0, expire=5_000))
    expired, promoted = r.sweep(now_ms=1_000)
    assert sorted(e.reason for e in expired) == sorted([TOO_LATE, WOULD_BE_LATE])
    assert promoted == 0
    assert r.demand().waiting[H] == 1
    assert r.held(H) == 1


def test_starved_low_is_scheduled_as_medium_first_but_keeps_its_tier():
    r = readahead(promotion_age_ms=1_000)
    r.add(work(M, 500, expire=99_999))
    r.add(work(L, 0, expire=99_999, offset=1))
    r.add(work(L, 900, expire=99_999, offset=2))
    _, promoted = r.sweep(now_ms=1_000)
    assert promoted == 1
    assert r.demand().waiting == {H: 0, M: 2, L: 1}
    first = r.pop(M)
    assert first is not None and first.tier is L and first.promoted
    assert r.held(L) == 1  # the second LOW is still held; the first one left
    second = r.pop(M)
    assert second is not None and second.tier is M


def test_fifo_demand_reports_the_oldest_per_tier():
    r = readahead()
    r.add(work(H, 300, 99_999))
    r.add(work(L, 100, 99_999))
    assert r.demand().oldest_enqueued_ms == {H: 300, M: None, L: 100}


def test_revoked_partitions_are_forgotten():
    r = readahead()
    r.add(work(H, 0, 99_999, partition=0))
    r.add(work(H, 0, 99_999, partition=1))
    assert r.drop_sources({("t.HIGH", 0)}) == 1
    assert r.held(H) == 1 and len(r) == 1


def test_pop_of_an_empty_tier():
    assert readahead().pop(L) is None


def test_pressure_policy_compares_backlog_with_the_owned_share_of_capacity():
    from inferq.dispatcher.eviction import PressurePolicy

    policy = PressurePolicy.from_budget(10, {H: 0.5, M: 2.8, L: 5.0})
    assert policy.capacity == {H: 60, M: 64}
    assert policy.pressed({H: (29, 0.5), M: (0, 1.0)}) is None
    assert policy.pressed({H: (30, 0.5), M: (0, 1.0)}) is H
    assert policy.pressed({H: (0, 1.0), M: (64, 1.0)}) is M
    assert policy.pressed({H: (500, 0.0)}) is None  # owns none of HIGH: not its call


def test_only_unpromoted_low_is_taken_for_eviction():
    r = readahead(promotion_age_ms=1_000)
    r.add(work(L, 0, 99_999, offset=1))
    r.add(work(L, 900, 99_999, offset=2))
    r.sweep(now_ms=1_000)  # the first is promoted
    taken = r.take_unpromoted_low()
    assert [w.offset for w in taken] == [2]
    assert r.held(L) == 1
