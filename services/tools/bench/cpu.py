"""CPU time per process and for the whole machine over a window, from /proc (Linux).

On a shared two-core machine a latency figure means little without saying who had the cores: each
benchmark window records the CPU seconds its own processes used and the machine's busy seconds, so
the rest (the broker, other people's work) shows as the difference.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse_process_ticks(stat_line: str) -> int:
    """utime + stime, in clock ticks, from a /proc/<pid>/stat line (the name may hold spaces and ')')."""
    fields = stat_line[stat_line.rindex(")") + 2 :].split()
    # After the name: state is field 3 of the whole line, so utime (14) and stime (15) are at 11 and 12.
    return int(fields[11]) + int(fields[12])


def parse_machine_ticks(proc_stat: str) -> tuple[int, int]:
    """(busy, total) clock ticks of all cores from /proc/stat's first line; idle and iowait are not busy."""
    values = [int(v) for v in proc_stat.splitlines()[0].split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice: already inside user and nice]
    total = sum(values[:8])
    return total - values[3] - values[4], total


def _process_ticks(pid: int) -> int | None:
    try:
        return parse_process_ticks(Path(f"/proc/{pid}/stat").read_text(encoding="ascii"))
    except (OSError, ValueError, IndexError):
        return None


def _machine_ticks() -> tuple[int, int]:
    return parse_machine_ticks(Path("/proc/stat").read_text(encoding="ascii"))


@dataclass(frozen=True)
class CpuUse:
    wall_s: float
    machine_busy_s: float
    machine_capacity_s: float
    by_process_s: dict[str, float]

    @property
    def others_s(self) -> float:
        """Busy CPU seconds not used by the named processes (broker, kernel, anyone else's work)."""
        return max(0.0, self.machine_busy_s - sum(self.by_process_s.values()))


class CpuWindow:
    """`start()` and `stop()` around a measurement; processes that vanished in between are left out."""

    def __init__(self, pids: Mapping[str, int | None]) -> None:
        self._pids = {name: pid for name, pid in pids.items() if pid is not None}
        self._start: dict[str, int] = {}
        self._machine: tuple[int, int] = (0, 0)
        self._wall = 0.0

    def start(self) -> None:
        self._start = {
            n: t for n, t in ((n, _process_ticks(p)) for n, p in self._pids.items()) if t is not None
        }
        self._machine = _machine_ticks()
        self._wall = time.monotonic()

    def stop(self) -> CpuUse:
        busy, total = _machine_ticks()
        used = {}
        for name, begun in self._start.items():
            now = _process_ticks(self._pids[name])
            if now is not None:
                used[name] = (now - begun) / _TICKS_PER_S
        return CpuUse(
            wall_s=time.monotonic() - self._wall,
            machine_busy_s=(busy - self._machine[0]) / _TICKS_PER_S,
            machine_capacity_s=(total - self._machine[1]) / _TICKS_PER_S,
            by_process_s=used,
        )
