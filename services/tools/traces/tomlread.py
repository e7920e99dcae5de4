"""Reading a parsed TOML table key by key, so every error names the key it is about.

`Table` wraps one table with its dotted path (``streams[2].bursts[0]``) and the keys it may hold.
Unknown keys are refused first, with the nearest known key suggested, so a typo
(``rate_per_minute``) is named as such instead of being silently ignored or reported as a missing
``rate_per_min``. Each accessor then checks the type and range of one key.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from inferq.tools.traces.errors import ScenarioError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class Table:
    def __init__(
        self, data: dict[str, Any], source: Path | str, path: str = "", *, keys: Iterable[str] | None = None
    ) -> None:
        """`keys`: the keys this table may hold (None: any, e.g. a table of model names)."""
        self._data = data
        self._source = source
        self._path = path
        if keys is not None:
            self._refuse_unknown(sorted(keys))

    def _refuse_unknown(self, known: list[str]) -> None:
        for name in sorted(set(self._data) - set(known)):
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise self.error(name, f"unknown key ({hint}known keys here: {', '.join(known)})")

    def key(self, name: str) -> str:
        return f"{self._path}.{name}" if self._path else name

    def error(self, name: str, problem: str) -> ScenarioError:
        return ScenarioError(self._source, self.key(name), problem)

    def has(self, name: str) -> bool:
        return name in self._data

    def _get(self, name: str) -> Any:
        return self._data.get(name)

    def string(self, name: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self._get(name)
        if value is None:
            if required:
                raise self.error(name, "is required")
            return default
        if not isinstance(value, str) or not value.strip():
            raise self.error(name, f"must be a non-empty string, got {value!r}")
        return value

    def integer(self, name: str, default: int | None = None, *, minimum: int = 0) -> int | None:
        value = self._get(name)
        if value is None:
            return default
        # bool is an int in Python; `count = true` is a mistake, not 1.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(name, f"must be a whole number, got {value!r}")
        if value < minimum:
            raise self.error(name, f"must be at least {minimum}, got {value}")
        return value

    def number(self, name: str, default: float | None = None, *, minimum: float = 0.0) -> float | None:
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(name, f"must be a number, got {value!r}")
        if value < minimum:
            raise self.error(name, f"must be at least {minimum:g}, got {value}")
        return float(value)

    def duration_s(self, name: str, default: float | None = None, *, positive: bool = False) -> float | None:
        """A number of seconds, or a string with a unit: ``"250ms"``, ``"90s"``, ``"10m"``, ``"2h"``."""
        value = self._get(name)
        if value is None:
            return default
        if isinstance(value, bool):
            raise self.error(name, f'must be a duration like "90s", got {value!r}')
        if isinstance(value, int | float):
            seconds = float(value)
        elif isinstance(value, str) and (match := _DURATION.match(value)):
            seconds = float(match.group(1)) * _UNIT_S[match.group(2)]
        else:
            raise self.error(
                name,
                f'must be a duration like "250ms", "90s", "10m", "2h" or a number of seconds, got {value!r}',
            )
        if seconds < 0 or (positive and seconds == 0):
            raise self.error(name, f"must be {'positive' if positive else 'non-negative'}, got {value!r}")
        return seconds

    def table(self, name: str, keys: Iterable[str] | None = None) -> Table | None:
        value = self._get(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.error(name, f"must be a table, got {type(value).__name__}")
        return Table(value, self._source, self.key(name), keys=keys)

    def tables(self, name: str, keys: Iterable[str]) -> list[Table]:
        """An array of tables (``[[name]]``); a single table is accepted as an array of one."""
        value = self._get(name)
        if value is None:
            return []
        if isinstance(value, dict):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.error(name, "must be an array of tables ([[...]])")
        return [Table(v, self._source, f"{self.key(name)}[{i}]", keys=keys) for i, v in enumerate(value)]

    def numbers(self, name: str) -> dict[str, float]:
        """A table of name → non-negative number (e.g. model → latency in seconds)."""
        inner = self.table(name)
        if inner is None:
            return {}
        out: dict[str, float] = {}
        for key in list(inner._data):
            value = inner.number(key)
            if value is not None:
                out[key] = value
        return out
