"""Load-test scenarios: TOML files users read and edit (``infra/scenarios/*.toml``), loaded and validated.

A scenario is a duration, a list of request streams and the simulated backend's latency per model.
Each stream is one business scenario (``realtime_chat``, ``morning_brief``...) with its arrival
process: Poisson arrivals at ``rate_per_min`` (alone, or in clusters of ``cluster_mean`` requests
on average spread over ``cluster_spread``), optional bursts (``count`` requests within
``within``, ``at`` a time or ``every`` so often) and an optional one-off ``dump`` of ``count``
requests ``at`` a time; its prompt and output sizes (characters or tokens); an optional deadline
(else the tier's default). Every refusal names the key, e.g. ``streams[1].bursts[0].every``.
See ``infra/scenarios/evening-peak.toml`` for a commented example.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from inferq.dispatcher.rate_budget import CHARS_PER_TOKEN
from inferq.messaging.tiers import Tier
from inferq.tools.paths import SCENARIO_DIR
from inferq.tools.traces.errors import ScenarioError
from inferq.tools.traces.tomlread import Table

DEFAULT_SEED = 2024


@dataclass(frozen=True)
class Size:
    """A text size as the user wrote it: characters or tokens."""

    amount: int
    unit: str = "chars"

    def __post_init__(self) -> None:
        if self.unit not in ("chars", "tokens") or self.amount < 1:
            raise ValueError(f"a size is a positive number of chars or tokens, got {self.amount} {self.unit}")

    @property
    def chars(self) -> int:
        return self.amount if self.unit == "chars" else self.amount * CHARS_PER_TOKEN

    @property
    def tokens(self) -> int:
        return self.amount if self.unit == "tokens" else max(1, -(-self.amount // CHARS_PER_TOKEN))


@dataclass(frozen=True)
class Burst:
    """`count` requests spread uniformly over `within_s`, once `at_s`, or every `every_s` from `start_s`."""

    count: int
    within_s: float = 0.0
    at_s: float | None = None
    every_s: float | None = None
    start_s: float = 0.0

    def __post_init__(self) -> None:
        if (self.at_s is None) == (self.every_s is None):
            raise ValueError("a burst has exactly one of at_s and every_s")
        if self.count < 1 or self.within_s < 0 or (self.every_s is not None and self.every_s <= 0):
            raise ValueError("a burst needs count >= 1, within_s >= 0 and every_s > 0")

    def starts(self, duration_s: float) -> list[float]:
        """The burst start times inside the scenario, in seconds."""
        if self.at_s is not None:
            return [self.at_s] if self.at_s < duration_s else []
        assert self.every_s is not None  # noqa: S101 - __post_init__ guarantees one of the two
        count = max(0, int((duration_s - self.start_s) // self.every_s) + 1)
        return [t for i in range(count) if (t := self.start_s + i * self.every_s) < duration_s]


@dataclass(frozen=True)
class Stream:
    scenario: str
    rate_per_min: float = 0.0
    # Poisson clusters: cluster starts are Poisson at rate_per_min / cluster_mean; each holds
    # 1 + Poisson(cluster_mean - 1) requests spread uniformly over cluster_spread_s. The mean rate
    # stays rate_per_min. cluster_mean 1 and spread 0: plain Poisson arrivals.
    cluster_mean: float = 1.0
    cluster_spread_s: float = 0.0
    bursts: tuple[Burst, ...] = ()
    dumps: tuple[Burst, ...] = ()
    prompt: Size = field(default_factory=lambda: Size(200))
    output: Size = field(default_factory=lambda: Size(100, "tokens"))
    deadline_ms: int | None = None
    priority: Tier | None = None
    model: str | None = None
    # 0: every request is its own session (a brief per user); N: requests share N sessions (chat).
    sessions: int = 0
    tenant: str = "loadtest"

    def __post_init__(self) -> None:
        if self.rate_per_min < 0 or self.sessions < 0:
            raise ValueError("rate_per_min and sessions must not be negative")
        if self.cluster_mean < 1 or self.cluster_spread_s < 0:
            raise ValueError("cluster_mean must be at least 1 and cluster_spread_s not negative")
        if self.deadline_ms is not None and self.deadline_ms < 1:
            raise ValueError("deadline_ms must be positive")


@dataclass(frozen=True)
class Scenario:
    name: str
    duration_s: float
    streams: tuple[Stream, ...]
    description: str = ""
    seed: int = DEFAULT_SEED
    # The local clock time the scenario models (e.g. "20:00"): which schedule window to pin.
    starts_at: str | None = None
    backend_latency_s: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    source: str = ""

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or not self.streams:
            raise ValueError("a scenario needs a positive duration and at least one stream")

    def backend_args(self) -> list[str]:
        """`inferq sim-backend` options giving the simulated backend this scenario's latencies."""
        return [arg for m, s in self.backend_latency_s.items() for arg in ("--latency", f"{m}={s:g}")]


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def resolve(name_or_path: str) -> Path:
    """A built-in scenario's name (``evening-peak``) or a path to a TOML file."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ScenarioError(path, "", "no such scenario file")
        return path
    builtin = SCENARIO_DIR / f"{name_or_path}.toml"
    if not builtin.is_file():
        raise ScenarioError(
            name_or_path, "", f"no built-in scenario of that name (built-ins: {', '.join(builtin_names())})"
        )
    return builtin


def load(name_or_path: str) -> Scenario:
    path = resolve(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(path, "", f"not valid TOML: {exc}") from exc
    return parse(data, source=path)


_TOP_KEYS = ("name", "description", "duration", "starts_at", "seed", "streams", "backend")
_STREAM_KEYS = (
    "scenario", "rate_per_min", "cluster_mean", "cluster_spread", "bursts", "dump", "prompt_chars",
    "prompt_tokens", "output_chars", "output_tokens", "deadline", "priority", "model", "sessions", "tenant",
)  # fmt: skip
_BURST_KEYS = ("count", "within", "at", "every", "start")
_DUMP_KEYS = ("count", "within", "at")


def parse(data: dict[str, object], *, source: Path | str = "<scenario>") -> Scenario:
    """Validate a parsed TOML document into a `Scenario`; every error names the key."""
    top = Table(dict(data), source, keys=_TOP_KEYS)
    name = top.string("name", default=Path(str(source)).stem)
    duration = top.duration_s("duration", positive=True)
    if duration is None:
        raise top.error("duration", 'is required (e.g. duration = "2h")')
    streams = [_stream(t) for t in top.tables("streams", _STREAM_KEYS)]
    if not streams:
        raise top.error("streams", "at least one [[streams]] table is required")
    latency: dict[str, float] = {}
    backend = top.table("backend", keys=("latency_s",))
    if backend is not None:
        latency = backend.numbers("latency_s")
    starts_at = top.string("starts_at")
    if starts_at is not None and not _is_clock(starts_at):
        raise top.error("starts_at", f'must be a local time "HH:MM", got {starts_at!r}')
    scenario = Scenario(
        name=name or "scenario",
        duration_s=duration,
        streams=tuple(streams),
        description=top.string("description", default="") or "",
        seed=top.integer("seed", DEFAULT_SEED) or 0,
        starts_at=starts_at,
        backend_latency_s=MappingProxyType(latency),
        source=str(source),
    )
    return scenario


def _stream(t: Table) -> Stream:
    scenario = t.string("scenario", required=True)
    assert scenario is not None  # noqa: S101 - required=True raised otherwise
    priority = t.string("priority")
    if priority is not None and priority not in Tier.__members__:
        raise t.error("priority", f"must be one of HIGH, MEDIUM, LOW, got {priority!r}")
    deadline = t.duration_s("deadline", positive=True)
    bursts = tuple(_burst(b, dump=False) for b in t.tables("bursts", _BURST_KEYS))
    dumps = tuple(_burst(d, dump=True) for d in t.tables("dump", _DUMP_KEYS))
    rate = t.number("rate_per_min", 0.0) or 0.0
    if rate == 0 and not bursts and not dumps:
        raise t.error("rate_per_min", "a stream needs a rate_per_min above 0, bursts or a dump")
    cluster_mean = t.number("cluster_mean", 1.0, minimum=1.0) or 1.0
    cluster_spread = t.duration_s("cluster_spread", 0.0) or 0.0
    for key in ("cluster_mean", "cluster_spread"):
        if rate == 0 and t.has(key):
            raise t.error(key, "clusters group the Poisson arrivals: it needs a rate_per_min above 0")
    stream = Stream(
        scenario=scenario,
        rate_per_min=rate,
        cluster_mean=cluster_mean,
        cluster_spread_s=cluster_spread,
        bursts=bursts,
        dumps=dumps,
        prompt=_size(t, "prompt", Size(200)),
        output=_size(t, "output", Size(100, "tokens")),
        deadline_ms=None if deadline is None else max(1, round(deadline * 1000)),
        priority=Tier(priority) if priority else None,
        model=t.string("model"),
        sessions=t.integer("sessions", 0) or 0,
        tenant=t.string("tenant", "loadtest") or "loadtest",
    )
    return stream


def _burst(t: Table, *, dump: bool) -> Burst:
    count = t.integer("count", minimum=1)
    if count is None:
        raise t.error("count", "is required")
    at = t.duration_s("at")
    every = None if dump else t.duration_s("every", positive=True)
    if dump and at is None:
        at = 0.0  # a dump with no time lands at the start, as briefs do at 20:00
    if at is not None and every is not None:
        raise t.error("every", "give either at or every, not both")
    if at is None and every is None:
        raise t.error("at", "a burst needs at (a time) or every (a period)")
    burst = Burst(
        count=count,
        within_s=t.duration_s("within", 0.0) or 0.0,
        at_s=at,
        every_s=every,
        start_s=(t.duration_s("start", 0.0) or 0.0) if not dump else 0.0,
    )
    return burst


def _size(t: Table, name: str, default: Size) -> Size:
    chars, tokens = t.integer(f"{name}_chars", minimum=1), t.integer(f"{name}_tokens", minimum=1)
    if chars is not None and tokens is not None:
        raise t.error(f"{name}_tokens", f"give either {name}_chars or {name}_tokens, not both")
    if chars is not None:
        return Size(chars, "chars")
    return Size(tokens, "tokens") if tokens is not None else default


def _is_clock(text: str) -> bool:
    hours, sep, minutes = text.partition(":")
    return bool(sep) and hours.isdigit() and minutes.isdigit() and int(hours) < 24 and int(minutes) < 60
