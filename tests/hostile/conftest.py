"""The hostile suite: every case a user or a broken producer could throw at inferq, kept as tests.

Each test records what it tried in the session's `HostileFigures`; the suite prints them at the end
(cases tried, 5xx answers, accepted requests lost, partitions stuck) so a run says more than
"passed". The tests assert the goals (zero 5xx, nothing lost, nothing stuck) themselves.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest


@dataclass
class HostileFigures:
    cases: dict[str, int] = field(default_factory=dict)
    server_errors: int = 0
    lost: int = 0
    stuck_partitions: int = 0

    def tried(self, area: str, count: int = 1) -> None:
        self.cases[area] = self.cases.get(area, 0) + count

    def lines(self) -> list[str]:
        tried = ", ".join(f"{area} {n}" for area, n in sorted(self.cases.items())) or "none"
        return [
            f"cases tried: {sum(self.cases.values())} ({tried})",
            f"5xx answers: {self.server_errors} (goal 0)",
            f"accepted requests lost: {self.lost} (goal 0)",
            f"stuck partitions: {self.stuck_partitions} (goal 0)",
        ]


_FIGURES = HostileFigures()


@pytest.fixture(scope="session")
def hostile_figures() -> Iterator[HostileFigures]:
    yield _FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _FIGURES.cases:
        terminalreporter.section("hostile suite figures")
        for line in _FIGURES.lines():
            terminalreporter.write_line(line)
