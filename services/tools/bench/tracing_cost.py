"""What tracing's hooks cost with tracing off, timed in process.

No throughput run can show it: the hooks are in the code either way, and a difference of well under a
percent drowns in the run-to-run noise of this machine. So the calls one request makes with tracing
off are timed here against the same chain of awaits without them:

- intake: `tracing.extract` of the record's headers;
- execution: an `enabled()` check and the extra coroutine the call runs in;
- the backend call: an `enabled()` check;
- the outcome: `tracing.annotate`.

The bench process never installs tracing, so these run exactly as in a dispatcher started without
OTEL_* settings.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from inferq import tracing
from inferq.dispatcher.backend import Completion

ITERATIONS = 200_000
REPEATS = 5
_COMPLETION = Completion("hi", "inferq-fast", 3, 2, 5, finish_reason="stop")
_HEADERS: list[tuple[str, bytes]] = []


async def _backend_answer() -> Completion:
    return _COMPLETION


async def _bare_call() -> Completion:
    return await _backend_answer()


async def _bare() -> None:
    completion = await _bare_call()
    assert completion is _COMPLETION  # noqa: S101 - keeps the call from being optimised out of sight


async def _hooked_call() -> Completion:
    if not tracing.enabled():  # as `ChatBackend.complete` does
        return await _backend_answer()
    raise RuntimeError("tracing is on")


async def _hooked_inner() -> None:
    completion = await _hooked_call()
    tracing.annotate(tracing.OUTCOME, "OK")
    assert completion is _COMPLETION  # noqa: S101


async def _hooked() -> None:
    tracing.extract(_HEADERS)
    if not tracing.enabled():  # as `Execution.call` does
        await _hooked_inner()
        return
    raise RuntimeError("tracing is on")


async def _per_call_ns(step: Any, iterations: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(iterations):
        await step()
    return (time.perf_counter_ns() - started) / iterations


def tracing_off_cost(iterations: int = ITERATIONS, repeats: int = REPEATS) -> dict[str, float]:
    """ns per request with the hooks and without (best of `repeats`, alternating), tracing off."""
    if tracing.enabled():
        raise RuntimeError("tracing is on in this process: the cost of tracing off cannot be measured")

    async def measure() -> tuple[float, float]:
        hooked: list[float] = []
        bare: list[float] = []
        for _ in range(repeats):
            hooked.append(await _per_call_ns(_hooked, iterations))
            bare.append(await _per_call_ns(_bare, iterations))
        return min(hooked), min(bare)

    hooked_ns, bare_ns = asyncio.run(measure())
    return {
        "ns_per_request": hooked_ns,
        "baseline_ns_per_request": bare_ns,
        "iterations": iterations,
        "repeats": repeats,
    }
