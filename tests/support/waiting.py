"""The tests' one bounded wait, for a state no event announces: poll until it holds, or fail the test
saying what was awaited, the bound and the last value seen. Never falls through on a timeout."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _failure(what: str, timeout_s: float, last: Any, detail: Callable[[], object] | None) -> AssertionError:
    message = f"{what}: not within {timeout_s} s (last: {last!r})"
    return AssertionError(message if detail is None else f"{message}\n{detail()}")


def wait_until(
    check: Callable[[], T],
    what: str,
    timeout_s: float = 5.0,
    *,
    interval_s: float = 0.02,
    done: Callable[[T], object] = bool,
    detail: Callable[[], object] | None = None,
) -> T:
    """Call `check` every `interval_s` until `done(value)` (by default: the value is truthy) and
    return that value; after `timeout_s`, an AssertionError naming `what`, the last value and,
    when given, `detail()` (a log's tail, say). An exception from `check` ends the wait at once."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if done(value):
            return value
        if time.monotonic() >= deadline:
            raise _failure(what, timeout_s, value, detail)
        time.sleep(interval_s)


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    what: str,
    timeout_s: float = 5.0,
    *,
    interval_s: float = 0.005,
    done: Callable[[T], object] = bool,
    detail: Callable[[], object] | None = None,
) -> T:
    """`wait_until` inside an event loop: `check` may be a coroutine function, the pause is
    `asyncio.sleep`, and a `check` still running at the bound is cancelled."""
    last: Any = None
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                value = check()
                last = await value if inspect.isawaitable(value) else value
                if done(last):
                    return last  # type: ignore[no-any-return]
                await asyncio.sleep(interval_s)
    except TimeoutError:
        raise _failure(what, timeout_s, last, detail) from None
