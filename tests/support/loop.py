"""No asyncio plugin: `@in_loop` runs an async test in a fresh event loop, as `asyncio.run` does."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec

P = ParamSpec("P")


def in_loop(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
    """Runs the async test `test` (fixtures and parameters as pytest passes them) in a fresh event loop."""

    @functools.wraps(test)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


def in_loop_within(timeout_s: float) -> Callable[[Callable[P, Coroutine[Any, Any, None]]], Callable[P, None]]:
    """`in_loop`, bounded: the test fails with `TimeoutError` once it ran `timeout_s`."""

    def decorate(test: Callable[P, Coroutine[Any, Any, None]]) -> Callable[P, None]:
        @functools.wraps(test)
        def run(*args: P.args, **kwargs: P.kwargs) -> None:
            asyncio.run(asyncio.wait_for(test(*args, **kwargs), timeout_s))

        return run

    return decorate
