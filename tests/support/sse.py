"""Server-sent events as the tests read them: (event name, JSON data) of each event, from a whole
body or from a stream's lines as they come. inferq's events carry one ``data:`` line each."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, Any]]:
    """Each event of `lines` as it completes (its ``data:`` line); comments skipped, the name
    ``message`` when the event has none."""
    name = "message"
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            yield name, json.loads(line[6:])
            name = "message"


def events_of(text: str) -> list[tuple[str, Any]]:
    """Every event of a whole SSE body."""
    return list(sse_events(text.split("\n")))


async def next_event(lines: AsyncIterator[str], timeout_s: float = 20.0) -> tuple[str, Any]:
    """The next event of a stream's lines as they come (httpx's `aiter_lines`), within `timeout_s`;
    comments (keep-alives) skipped. `AssertionError` when the stream ends first."""
    name = "message"
    async with asyncio.timeout(timeout_s):
        async for line in lines:
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                return name, json.loads(line[6:])
    raise AssertionError("the event stream ended")
