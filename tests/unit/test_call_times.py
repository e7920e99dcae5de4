"""Call times learned online (issue 14 item 5): the early drop follows the calls that completed."""

from __future__ import annotations

import pytest

from inferq.dispatcher.call_times import CallTimes
from inferq.dispatcher.next_start import NextStart
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.policies import TieredScheduler
from inferq.dispatcher.readahead import WOULD_BE_LATE, ReadAhead
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier
from tests.support.work import a_work

H, M = Tier.HIGH, Tier.MEDIUM


def work(n: int, expire: int = 10**9) -> Work:
    return a_work(H, n, offsets=PartitionOffsets("t", 0), request_id=f"r{n}", expire_at_ms=expire)


def test_starts_from_the_default_and_follows_completed_calls() -> None:
    calls = CallTimes({H: 500.0, M: 2800.0}, weight=0.5)
    assert calls.typical_ms(H) == 500
    calls.started(1, H, 1000)
    calls.ended(1, 1900, completed=True)
    assert calls.typical_ms(H) == pytest.approx(700)
    assert calls.typical_ms(M) == 2800


def test_failed_and_untimed_calls_teach_nothing() -> None:
    calls = CallTimes({H: 500.0}, weight=0.5)
    calls.started(1, H, 0)
    calls.ended(1, 10_000, completed=False)
    calls.started(2, H, 0)
    calls.ended(2, None, completed=True)
    calls.ended(3, 100, completed=True)  # never started
    assert calls.typical_ms(H) == 500
    assert calls.running() == 0


def test_bounded_to_a_factor_of_the_default() -> None:
    calls = CallTimes({H: 500.0}, weight=1.0, bound=4.0)
    calls.started(1, H, 0)
    calls.ended(1, 3_600_000, completed=True)  # a stuck call
    assert calls.typical_ms(H) == 2000
    calls.started(2, H, 0)
    calls.ended(2, 0, completed=True)  # an instant answer
    assert calls.typical_ms(H) == 125


def test_learning_off_keeps_the_default() -> None:
    calls = CallTimes({H: 500.0}, learn=False)
    calls.started(1, H, 0)
    calls.ended(1, 1500, completed=True)
    assert calls.typical_ms(H) == 500


def test_remaining_time_of_running_calls() -> None:
    calls = CallTimes({H: 500.0, M: 2800.0})
    calls.started(1, M, 0)
    calls.started(2, H, 100)
    calls.started(3, H, 0)
    calls.started(4, H, -1000)  # past its typical time: about to end
    assert calls.remaining_ms(300) == [0.0, 200.0, 300.0, 2500.0]


@pytest.mark.parametrize("bad", [{"weight": 0.0}, {"weight": 1.5}, {"bound": 0.5}])
def test_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        CallTimes({H: 500.0}, **bad)  # type: ignore[arg-type]


def test_early_drop_uses_the_learned_latency() -> None:
    """Chats that take 2 s instead of 0.5 s: a chat with 1 s left is dropped once the dispatcher
    has seen them, not before."""
    calls = CallTimes({H: 500.0}, weight=0.5)
    readahead = ReadAhead(promotion_age_ms=10**9, early_drop_ms={H: 500}, calls=calls)
    decide = NextStart(readahead, TieredScheduler(Schedule.default(budget=10).pin("peak")))
    assert readahead.check(work(0, expire=11_000), 10_000) is None
    now = 10_000
    for n in range(1, 6):
        readahead.add(work(n))
        start = decide.take(H, now)
        assert start is not None
        decide.ended(start.work, now + 2000)
        now += 2000
    assert calls.typical_ms(H) > 1900
    assert readahead.check(work(9, expire=now + 1000), now) == WOULD_BE_LATE
