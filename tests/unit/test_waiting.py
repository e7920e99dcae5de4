"""The tests' bounded wait: returns the value that ended it, and a timeout fails, never falls through."""

import asyncio

import pytest

from tests.support.waiting import eventually, wait_until


def test_the_wait_returns_what_ended_it_and_a_timeout_fails_naming_the_last_value() -> None:
    values = iter([0, 1, 2, 3])
    assert wait_until(lambda: next(values), "the third", done=lambda v: v == 2, interval_s=0) == 2
    with pytest.raises(AssertionError, match=r"never: not within 0.05 s \(last: 0\)"):
        wait_until(lambda: 0, "never", 0.05)


def test_the_async_wait_takes_coroutines_too_and_fails_the_same_way() -> None:
    async def three() -> int:
        return 3

    assert asyncio.run(eventually(three, "three")) == 3
    with pytest.raises(AssertionError, match=r"never: not within 0.05 s \(last: False\)"):
        asyncio.run(eventually(lambda: False, "never", 0.05))


def test_a_timeout_adds_the_detail_asked_for_at_the_bound_and_an_error_in_the_check_ends_the_wait() -> None:
    with pytest.raises(AssertionError, match=r"never: not within 0.05 s \(last: 0\)\nthe log's tail"):
        wait_until(lambda: 0, "never", 0.05, detail=lambda: "the log's tail")

    def ended() -> bool:
        raise AssertionError("the process ended")

    with pytest.raises(AssertionError, match="the process ended"):
        wait_until(ended, "never", 5)
