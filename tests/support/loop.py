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
