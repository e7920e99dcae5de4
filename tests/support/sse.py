"""Server-sent events as the tests read them: (event name, JSON data) of each event, from a whole
body or from a stream's lines as they come. inferq's events carry one ``data:`` line each."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
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
