from services.dispatcher.offsets import PartitionOffsets
from services.dispatcher.waiting import TOO_LATE, WOULD_BE_LATE, WaitingRoom
from services.dispatcher.work import Work
from services.messaging.tiers import Tier

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW


def work(tier: Tier, created: int, expire: int, partition: int = 0, offset: int = 0) -> Work:
    request = {"request_id": f"{tier}-{created}-{offset}", "created_at_ms": created, "expire_at_ms": expire}
    return Work(request=request, tier=tier, offsets=PartitionOffsets(f"t.{tier}", partition), offset=offset)


def room(**kw) -> WaitingRoom:
    return WaitingRoom(promotion_age_ms=kw.pop("promotion_age_ms", 60_000), **kw)


def test_expired_and_doomed_requests_are_swept_without_a_token():
    r = room(early_drop_ms={H: 500})
    r.add(work(H, 0, expire=1_000))  # expired at 1000
    r.add(work(H, 0, expire=1_300))  # 300 ms left, chat takes 500: doomed
    r.add(work(H, 0, expire=5_000))
    expired, promoted = r.sweep(now_ms=1_000)
    assert sorted(e.reason for e in expired) == sorted([TOO_LATE, WOULD_BE_LATE])
    assert promoted == 0
    assert r.demand().waiting[H] == 1
    assert r.held(H) == 1


def test_starved_low_is_scheduled_as_medium_first_but_keeps_its_tier():
    r = room(promotion_age_ms=1_000)
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
    r = room()
    r.add(work(H, 300, 99_999))
    r.add(work(L, 100, 99_999))
    assert r.demand().oldest_enqueued_ms == {H: 300, M: None, L: 100}


def test_revoked_partitions_are_forgotten():
    r = room()
    r.add(work(H, 0, 99_999, partition=0))
    r.add(work(H, 0, 99_999, partition=1))
    assert r.drop_sources({("t.HIGH", 0)}) == 1
    assert r.held(H) == 1 and len(r) == 1


def test_pop_of_an_empty_tier():
    assert room().pop(L) is None
