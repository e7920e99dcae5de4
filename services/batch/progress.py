"""The batch's progress bar (tqdm on stderr): lines done of the total, their rate and ETA, and after
it how many were submitted and how many ended in each status."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO

from tqdm import tqdm


def summary(submitted: int, done: Counter[str]) -> str:
    """The text after the bar: ``submitted=120 OK=100 FAILED=2`` (statuses in a fixed order)."""
    parts = [f"submitted={submitted}"] + [f"{status}={n}" for status, n in sorted(done.items()) if n]
    return " ".join(parts)


class Progress:
    def __init__(
        self, total: int, *, already_done: Counter[str], already_submitted: int, out: TextIO | None = None
    ) -> None:
        self._drawn_at = 0.0
        self.done: Counter[str] = Counter(already_done)
        self.submitted = already_submitted
        self._bar = tqdm(
            total=total,
            initial=sum(already_done.values()),
            unit="req",
            file=out or sys.stderr,
            dynamic_ncols=True,
            mininterval=0.5,
            # The ETA comes from this run's rate, not from lines done in an earlier run.
            smoothing=0.1,
        )
        self._refresh()

    def _refresh(self) -> None:
        self._bar.set_postfix_str(summary(self.submitted, self.done), refresh=False)

    def sent(self) -> None:
        self.submitted += 1
        self._refresh()
        # Submissions move no bar; redraw for them at most twice a second.
        now = time.monotonic()
        if now - self._drawn_at >= 0.5:
            self._drawn_at = now
            self._bar.refresh()

    def finished(self, status: str) -> None:
        self.done[status] += 1
        self._refresh()
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()
