"""NextStart, the one "what starts next" decision of the dispatcher and the simulator, and the
model choice beside it. Pure: no Kafka, no clock but the numbers given."""

from __future__ import annotations

import pytest

from inferq.dispatcher.models import ModelChoice
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.policies import TieredScheduler
from inferq.dispatcher.readahead import TOO_LATE, ReadAhead
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier
from tests.support.work import a_work

H, M, L = Tier.HIGH, Tier.MEDIUM, Tier.LOW
IDLE = dict.fromkeys(Tier, 0)


def work(tier: Tier, created: int, expire: int = 99_999, model: str | None = None) -> Work:
    return a_work(tier, created, created_at_ms=created, expire_at_ms=expire, model=model)


def next_start(*waiting: Work, promotion_age_ms: int = 60_000) -> tuple[NextStart, ReadAhead]:
    readahead = ReadAhead(promotion_age_ms=promotion_age_ms)
    for item in waiting:
        readahead.add(item)
    return NextStart(readahead, TieredScheduler(Schedule.default(budget=10).pin("peak"))), readahead


def test_nothing_waiting_starts_nothing() -> None:
    decide, _ = next_start()
    assert not decide.waiting()
    assert decide.tier(IDLE, budget=10) is None


def test_floors_first_in_priority_order_then_arrival_order_within_a_tier() -> None:
    decide, readahead = next_start(work(L, 1), work(H, 3), work(H, 2), work(M, 4))
    assert decide.tier(IDLE, budget=10) is H
    start = decide.take(H, now_ms=10)
    assert start is not None and start.work.created_at_ms == 3 and start.expired is None
    assert len(readahead) == 3


def test_the_policy_may_say_wait_while_work_waits() -> None:
    decide, _ = next_start(work(L, 1))
    # At peak LOW's ceiling is 1: one brief running already, the next waits with free tokens.
    assert decide.waiting()
    assert decide.tier({H: 0, M: 0, L: 1}, budget=10) is None
    assert decide.tier(IDLE, budget=10) is L


def test_a_request_whose_deadline_passed_while_waiting_is_taken_as_expired() -> None:
    decide, readahead = next_start(work(H, 1, expire=100))
    start = decide.take(H, now_ms=100)
    assert start is not None and start.expired == TOO_LATE
    assert len(readahead) == 0  # taken either way: answered EXPIRED, never called


def test_taking_from_an_empty_tier_says_so() -> None:
    decide, _ = next_start(work(H, 1))
    assert decide.take(L, now_ms=0) is None  # its partition was revoked while the pool was asked


def test_a_promoted_brief_takes_a_medium_token() -> None:
    decide, readahead = next_start(work(L, 0), promotion_age_ms=1_000)
    readahead.sweep(now_ms=5_000)
    assert decide.tier({H: 0, M: 0, L: 1}, budget=10) is M
    start = decide.take(M, now_ms=5_000)
    assert start is not None and start.tier is M and start.work.tier is L


def test_models_by_tier_with_the_request_as_override() -> None:
    models = ModelChoice.of(fast="f", accurate="a", cheap="c")
    assert models.model_for(work(H, 0)) == "f"
    assert models.model_for(work(M, 0)) == "a"
    assert models.model_for(work(L, 0, model="special")) == "special"
    promoted = work(L, 0)
    promoted.promoted = True
    assert models.model_for(promoted) == "c"  # scheduled as MEDIUM, still a brief
    with pytest.raises(ValueError, match="LOW"):
        ModelChoice({H: "f", M: "a"})
