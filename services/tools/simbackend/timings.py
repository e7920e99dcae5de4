"""When the simulator received, first streamed and finished each benchmark call (`GET /timings`).

A call is recorded only when its user message carries the benchmark's marker
(`inferq.tools.bench.recorder.marked_content`): the delivery benchmark sends the same marked
request to the simulator directly and through inferq, then subtracts the simulator's own time from
the time its client waited. Stamps are epoch nanoseconds from this machine's clock, the clock the
benchmark's client stamps with too. At most `max_calls` are kept (a long run keeps its first ones).
`served` counts the calls answered in full per marker, so a test sees a request the backend ran twice.
`bodies` keeps each marked call's request body without its messages (the parameters the backend
was sent), for `GET /received/{marker}`: a test sees what reached the backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inferq.tools.bench.recorder import find_marker

MAX_CALLS = 200_000


@dataclass
class CallTiming:
    received_ns: int
    marker: str = ""
    first_token_ns: int | None = None
    done_ns: int | None = None


@dataclass
class CallTimings:
    clock_ns: Callable[[], int] = time.time_ns
    max_calls: int = MAX_CALLS
    calls: dict[str, CallTiming] = field(default_factory=dict)
    served: dict[str, int] = field(default_factory=dict)
    bodies: dict[str, dict[str, object]] = field(default_factory=dict)

    def received(self, body: object, whole: Callable[[], object] | None = None) -> CallTiming | None:
        """Start recording the call whose request body is `body` (its messages at least); None when
        it is not marked (or the record is full). A marker seen again (a retry) restarts its record.
        A marked call's whole body (`whole()`, else `body`) is kept without its messages: only a
        marked call pays for it."""
        marker = find_marker(body)
        if marker is None or (marker not in self.calls and len(self.calls) >= self.max_calls):
            return None
        timing = CallTiming(self.clock_ns(), marker)
        self.calls[marker] = timing
        kept = body if whole is None else whole()
        if isinstance(kept, dict):
            self.bodies[marker] = {k: v for k, v in kept.items() if k != "messages"}
        return timing

    def first_token(self, timing: CallTiming | None) -> None:
        if timing is not None and timing.first_token_ns is None:
            timing.first_token_ns = self.clock_ns()

    def done(self, timing: CallTiming | None) -> None:
        if timing is not None:
            timing.done_ns = self.clock_ns()
            self.served[timing.marker] = self.served.get(timing.marker, 0) + 1

    def as_dict(self) -> dict[str, list[int | None]]:
        """marker → [received_ns, first_token_ns, done_ns]."""
        return {k: [t.received_ns, t.first_token_ns, t.done_ns] for k, t in self.calls.items()}

    def reset(self) -> None:
        self.calls.clear()
        self.served.clear()
        self.bodies.clear()
