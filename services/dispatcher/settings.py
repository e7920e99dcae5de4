"""Dispatcher settings: env prefix ``INFERQ_DISPATCHER_``; the values ingest reads too under their
shared names (``INFERQ_BUDGET``, ``INFERQ_TYPICAL_LATENCY_S``, ``INFERQ_SCENARIO_TIERS``,
``INFERQ_MODEL_*``; `inferq.settings.shared`); Kafka under ``INFERQ_KAFKA_``, Redis under
``INFERQ_REDIS_``. The previous release's bare ``INFERQ_<FIELD>`` names are still read
(`RenamingSettings`), with a warning."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inferq.dispatcher.backend_specs import BackendSpec, backend_url, check_backends
from inferq.dispatcher.circuit import BreakerPolicy
from inferq.dispatcher.rate_budget import MAX_COUNT, RateLimit
from inferq.dispatcher.routing import DEFAULT_BACKEND, BackendRoutes, check_tier_backends
from inferq.dispatcher.schedule import Schedule, TierLimits
from inferq.dispatcher.streaming import ChunkPolicy
from inferq.dispatcher.tokens.settings import RedisBudgetSettings
from inferq.messaging import limits
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.readiness import ReadinessSettings
from inferq.messaging.tiers import Tier
from inferq.serving import HttpLimits, LogSettings
from inferq.settings.renamed import RenamingSettings
from inferq.settings.shared import (
    Budget,
    DispatcherGroup,
    ModelAccurate,
    ModelCheap,
    ModelFast,
    ScenarioTiers,
    TypicalLatency,
)
from inferq.tenancy.settings import TenancySettings


class ModelRateLimit(BaseModel):
    """One model's limits per minute in INFERQ_DISPATCHER_RATE_LIMITS; unset: not limited (unless learned)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    tpm: int | None = Field(default=None, ge=1, le=MAX_COUNT)


def _default_dispatcher_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


# The dispatcher's own fields, read under the bare INFERQ_ prefix by the previous release.
_OWN_FIELDS_RENAMED = (
    "policy",
    "schedule_file",
    "schedule_pin",
    "timezone",
    "low_peak_ceiling",
    "readahead_per_tier",
    "promotion_age_s",
    "early_drop",
    "learn_latency",
    "forecast_lending",
    "evict_low_under_pressure",
    "pressure_capacity",
    "housekeeping_interval_s",
    "adaptive",
    "adaptive_window_s",
    "adaptive_min_budget",
    "max_attempts",
    "retry_base_backoff_s",
    "retry_max_backoff_s",
    "poison_alarm_ratio",
    "backend_url",
    "backend_api_key",
    "backend_timeout_s",
    "backends",
    "tier_backends",
    "breaker_failures",
    "breaker_storm_429",
    "breaker_storm_window_s",
    "breaker_open_s",
    "stream_chunk_tokens",
    "stream_chunk_linger_ms",
    "rate_limits",
    "commit_interval_s",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "drain_timeout_s",
    "tenant_headroom_slots",
    "tenant_active_window_s",
    "metrics_host",
    "metrics_port",
)


class DispatcherSettings(RenamingSettings):
    """The dispatcher's own settings (``INFERQ_DISPATCHER_*``), the shared values it reads (bare
    ``INFERQ_*``, `inferq.settings.shared`) and its blocks: Kafka (``INFERQ_KAFKA_*``), the tenants
    file (``INFERQ_TENANTS_*``), Redis (``INFERQ_REDIS_*``)."""

    model_config = SettingsConfigDict(
        env_prefix="INFERQ_DISPATCHER_",
        extra="ignore",
        populate_by_name=True,
        use_attribute_docstrings=True,
        # A refused value may be a URL with a key in it: errors never quote the input.
        hide_input_in_errors=True,
    )
    # The previous release's names: the bare INFERQ_ prefix, and ingest's name of the scenario tiers.
    RENAMED: ClassVar[Mapping[str, str]] = {
        **{f"INFERQ_{name.upper()}": f"INFERQ_DISPATCHER_{name.upper()}" for name in _OWN_FIELDS_RENAMED},
        "INFERQ_GROUP_ID": "INFERQ_DISPATCHER_GROUP_ID",
        "INFERQ_INGEST_SCENARIO_TIERS": "INFERQ_SCENARIO_TIERS",
    }

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    tenants: TenancySettings = Field(default_factory=TenancySettings)
    """INFERQ_TENANTS_FILE (ingest's and results' file): the tenants whose Kafka records run, their
    entitlements, weights and caps; unset: open mode, every tenant accepted with the global rules."""
    group_id: DispatcherGroup
    dispatcher_id: str = Field(
        default_factory=_default_dispatcher_id,
        validation_alias="INFERQ_DISPATCHER_ID",
        json_schema_extra={"shown_default": "<host name>-<pid>"},
    )
    """This member's name: its Kafka client id and its name in the shared budget's leases."""
    budget: Budget
    policy: Literal["inferq", "static", "fifo"] = "inferq"
    """inferq: tiered and work-conserving; static: the default peak split 6/3/1 as hard caps; fifo: one
    queue."""
    schedule_file: Path | None = None
    """A TOML schedule (see infra/schedule.toml); unset: the built-in table scaled to the budget."""
    schedule_pin: str | None = None
    """Force one window by name ("peak", "normal", "night"), e.g. for tests and load tests."""
    timezone: str = "UTC"
    """The time zone of the built-in schedule's windows (an IANA name)."""
    low_peak_ceiling: int | None = Field(default=None, ge=0)
    """Lift LOW's ceiling in the peak window (infra/schedule.toml caps it at 1) so briefs borrow idle
    capacity."""
    readahead_per_tier: int | None = Field(default=None, ge=1, le=100_000)
    """Requests held in memory per tier beyond those running; past it the tier's partitions pause.
    Unset: twice the budget, at least 20 (enough to keep every slot fed between fetches)."""

    @property
    def readahead(self) -> int:
        return self.readahead_per_tier or max(20, 2 * self.budget)

    promotion_age_s: float = Field(default=1800.0, gt=0)
    """A LOW request waiting longer than this is served as if MEDIUM."""
    early_drop: bool = True
    """Drop a request whose remaining time is below its tier's typical inference time."""
    typical_latency_s: TypicalLatency
    learn_latency: bool = True
    """Learn each tier's typical call time from its completed calls (EWMA from INFERQ_TYPICAL_LATENCY_S,
    bounded to [/4, x4] of it; services/dispatcher/call_times.py); early drop uses the learned one."""
    forecast_lending: bool = False
    """A tier may borrow a slot past its ceiling when the forecast of the higher tiers' arrivals over
    the call's expected time leaves them free slots (services/dispatcher/forecast.py); never into HIGH's
    headroom. Off by default: a lent call cannot be taken back, and on an analysis surge at peak or in
    normal hours it cost analyses their deadlines (docs/benchmarks/scheduling.md, issue 22). A tier
    whose every backend is preemptible is lent every idle slot instead (no forecast needed)."""
    evict_low_under_pressure: bool = False
    """Shed waiting LOW (answered EVICTED) while HIGH or MEDIUM is over its backlog capacity."""
    pressure_capacity: dict[Tier, int] = Field(default_factory=dict)
    """Backlog capacity per tier for eviction; unset tiers: budget x 60% of the deadline / typical latency."""
    housekeeping_interval_s: float = Field(default=0.25, gt=0)
    """How often waiting read-ahead is checked for expiry and aging."""
    adaptive: bool = True
    """Shrink the budget in effect when the backend answers 429 or slows down, and grow it back to
    INFERQ_BUDGET as it recovers (services/dispatcher/adaptive.py)."""
    adaptive_window_s: float = Field(default=5.0, gt=0)
    """The window over which the adaptive budget judges the backend's answers."""
    adaptive_min_budget: int = Field(default=1, ge=1)
    """The adaptive budget never shrinks below this."""
    coordination: Literal["local", "redis"] = Field(default="local", validation_alias="INFERQ_COORDINATION")
    """local: this process alone holds the budget; redis: the group shares it (and each model's
    minute) through Redis leases (INFERQ_REDIS_*)."""
    redis: RedisBudgetSettings = Field(default_factory=RedisBudgetSettings)
    max_attempts: int = Field(default=3, ge=1, le=20)
    """Attempts in all for a retryable failure (timeout, connection error, 429, 5xx); then dead letter."""
    retry_base_backoff_s: float = Field(default=0.5, gt=0)
    """The first retry's backoff; each next one doubles, with jitter."""
    retry_max_backoff_s: float = Field(default=30.0, gt=0)
    """The longest backoff between two attempts."""
    scenario_tiers: ScenarioTiers
    created_at_max_lag_s: float = Field(default=limits.MAX_APPEND_LAG_MS / 1000, gt=0, le=7 * 24 * 3600)
    """How long before the broker appended a request record (LogAppendTime) its created_at_ms may
    be: an earlier one is raised to this (a producer's buffering, a MirrorMaker's lag; backdating
    jumps no queue)."""
    poison_alarm_ratio: float = Field(default=0.2, gt=0, le=1)
    """Above this share of undecodable records on a topic (60 s window) the dispatcher logs an error."""
    backend_url: str = "http://127.0.0.1:8780/v1"
    """The OpenAI-compatible backend ("default"): its /v1 base URL, without credentials."""
    backend_api_key: SecretStr | None = None
    """The default backend's API key, sent as a bearer token."""
    backend_timeout_s: float = Field(default=120.0, gt=0)
    """Upper bound of one backend call; the remaining deadline bounds it further."""
    backend_preemptible: bool = Field(
        default=False,
        validation_alias=AliasChoices(
            "INFERQ_DISPATCHER_BACKEND_PREEMPTIBLE", "INFERQ_BACKEND_PREEMPTIBLE", "backend_preemptible"
        ),
    )
    """The default backend stops generating and frees the slot when its client hangs up (vLLM, TGI,
    llama.cpp's server, SGLang): LOW and MEDIUM may borrow every idle slot, the HIGH headroom
    included, and a call lent its slot (past its tier's ceiling or into the headroom) may be
    cancelled for a higher tier's request (services/dispatcher/preemption.py). Off by default: a
    hosted API may go on counting an abandoned call. Other backends: "preemptible" in their
    INFERQ_DISPATCHER_BACKENDS entry."""
    max_preemptions: int = Field(default=3, ge=0, le=100)
    """A request preempted this many times is no longer lent a slot (past its tier's ceiling or
    into the headroom): it waits within its tier's share, so it cannot starve."""
    backends: dict[str, BackendSpec] = Field(default_factory=dict, max_length=32)
    """Backends beside INFERQ_DISPATCHER_BACKEND_URL's ("default"), by name (JSON: url,
    api_key_env, max_concurrency, preemptible; services/dispatcher/backend_specs.py)."""
    tier_backends: dict[Tier, list[str]] = Field(default_factory=dict)
    """Per tier the backends to call, in order, e.g. '{"LOW": ["cheap", "default"]}'; unset tiers
    call "default" alone (services/dispatcher/routing.py)."""
    breaker_failures: int = Field(default=5, ge=1, le=10_000)
    """A tier's backend is passed over (circuit open) after this many failed calls in a row (5xx,
    timeout, lost connection) or INFERQ_DISPATCHER_BREAKER_STORM_429 429s within the window; after
    the pause one probe call at a time tries it again (services/dispatcher/circuit.py). Only with
    several backends."""
    breaker_storm_429: int = Field(default=20, ge=1, le=100_000)
    """429s within the storm window that open a backend's circuit."""
    breaker_storm_window_s: float = Field(default=10.0, gt=0, le=3600)
    """The window in which 429s are counted for the circuit."""
    breaker_open_s: float = Field(default=10.0, gt=0, le=3600)
    """How long an open circuit passes its backend over before a probe call."""
    stream_chunk_tokens: int = Field(default=64, ge=1, le=10_000)
    """After its first token (written at once), a streamed answer's tokens go to the chunk topic as one
    chunk once the oldest waiting token is INFERQ_DISPATCHER_STREAM_CHUNK_LINGER_MS old, about
    INFERQ_DISPATCHER_STREAM_CHUNK_CHARS characters wait, or this many tokens do, whichever comes
    first (services/dispatcher/streaming.py). Fewer, larger chunks cost every process less CPU."""
    stream_chunk_linger_ms: float = Field(default=40.0, ge=0, le=10_000)
    """The longest a streamed token waits for its chunk to fill (after the first, written at once)."""
    stream_chunk_chars: int = Field(default=256, ge=1, le=1_000_000)
    """About how many characters (texts, tool-call pieces, logprobs) make a chunk full."""
    rate_limits: dict[str, ModelRateLimit] = Field(default_factory=dict)
    """Requests and tokens per minute per backend model, e.g. '{"inferq-fast": {"rpm": 500, "tpm":
    90000}}'; the backend's x-ratelimit-* headers teach them too, the lower one holding
    (services/dispatcher/rate_budget.py). Unset and no headers: only the concurrency budget. With
    coordination "redis" the group shares each minute (services/dispatcher/shared_rate/)."""
    model_fast: ModelFast
    model_accurate: ModelAccurate
    model_cheap: ModelCheap
    commit_interval_s: float = Field(default=0.2, gt=0)
    """How often the offsets of finished records are committed."""
    session_timeout_ms: int = Field(default=2_000, ge=500, le=300_000)
    """Group membership (classic protocol, aiokafka): a member silent this long is declared dead and
    its partitions move. 2 s (Kafka's client default is 45 s, aiokafka's 10 s) brings the takeover
    of a SIGKILLed dispatcher to about 2.5 s; the broker must allow it (group.min.session.timeout.ms,
    6 s by default, at most this). The trade-off is in docs/deployment.md."""
    heartbeat_interval_ms: int = Field(default=500, ge=100, le=100_000)
    """A quarter of the session: three heartbeats may be lost or late before the member is dropped."""
    drain_timeout_s: float = Field(default=30.0, ge=0)
    """On SIGTERM, in-flight calls get this long to finish before their outcome is left to the next owner."""
    tenant_headroom_slots: int = Field(default=2, ge=0, le=10_000)
    """While more than one tenant is active (work waiting or running, or a request enqueued within
    the window), a tenant holding its weighted share of the budget may not take the last this many
    free tokens, and others take them for HIGH only (services/dispatcher/tenant_headroom.py);
    0 turns it off."""
    tenant_active_window_s: float = Field(default=10.0, ge=0, le=86_400)
    """A tenant with a request enqueued within this many seconds counts as active for the headroom."""
    metrics_host: str = "127.0.0.1"
    """The address of /metrics, /healthz and /readyz (--host)."""
    metrics_port: int = 8702
    """The port of /metrics, /healthz and /readyz (--port)."""

    @model_validator(mode="after")
    def _heartbeats_fit_in_a_session(self) -> DispatcherSettings:
        if self.heartbeat_interval_ms * 2 > self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be at most half of "
                f"session_timeout_ms ({self.session_timeout_ms}): one late heartbeat would drop the member"
            )
        return self

    @model_validator(mode="after")
    def _backends_are_known(self) -> DispatcherSettings:
        check_backends(self.backends)
        known = [DEFAULT_BACKEND, *self.backends]
        check_tier_backends(self.tier_backends, known)
        if self.backends:
            # With several backends the rate budget keys a model by its backend (routing.rate_key):
            # a limit named otherwise would never apply.
            unnamed = [key for key in self.rate_limits if key.split("/", 1)[0] not in known]
            if unnamed:
                raise ValueError(
                    "with several backends INFERQ_DISPATCHER_RATE_LIMITS names each model "
                    f"<backend>/<model>: {unnamed} name no backend (known: {sorted(known)})"
                )
        return self

    @field_validator("backend_url")
    @classmethod
    def _backend_url_without_credentials(cls, value: str) -> str:
        return backend_url(value, key_setting="INFERQ_DISPATCHER_BACKEND_API_KEY")


# Variables read by earlier versions under another name: set, they would be ignored without a word.
RENAMED_VARIABLES = {"INFERQ_LEASE_TTL_S": "INFERQ_REDIS_LEASE_TTL_S"}


def renamed_variables_in(environ: Mapping[str, str]) -> list[str]:
    """A line per variable of `environ` that is no longer read, naming the one to use instead."""
    return [f"{old} is no longer read: use {new}" for old, new in RENAMED_VARIABLES.items() if old in environ]


def preemptible_backends(settings: DispatcherSettings) -> frozenset[str]:
    """The names of the backends whose calls may be preempted (``preemption.py``)."""
    named = {name for name, spec in settings.backends.items() if spec.preemptible}
    return frozenset(named | ({DEFAULT_BACKEND} if settings.backend_preemptible else set()))


def preemptible_tiers(settings: DispatcherSettings, routes: BackendRoutes | None = None) -> frozenset[Tier]:
    """The tiers whose every backend is preemptible: lent every idle slot (``policies.py``).
    `routes`: the backends each tier calls (None: as the settings route them, what `bootstrap`
    builds from them; the simulator's case)."""
    names = preemptible_backends(settings)
    if not names:
        return frozenset()
    if routes is not None:
        return frozenset(t for t in Tier if set(routes.order(t)) <= names)
    return frozenset(t for t in Tier if set(settings.tier_backends.get(t) or [DEFAULT_BACKEND]) <= names)


def rate_limits(settings: DispatcherSettings) -> dict[str, RateLimit]:
    """The configured limits per model (``INFERQ_DISPATCHER_RATE_LIMITS``) as the rate budget reads them."""
    return {model: RateLimit(rpm=limit.rpm, tpm=limit.tpm) for model, limit in settings.rate_limits.items()}


def breaker_policy(settings: DispatcherSettings) -> BreakerPolicy:
    """When a backend's circuit opens and how long it stays open (``INFERQ_DISPATCHER_BREAKER_*``)."""
    return BreakerPolicy(
        failures=settings.breaker_failures,
        storm_429=settings.breaker_storm_429,
        storm_window_ms=round(settings.breaker_storm_window_s * 1000),
        open_ms=round(settings.breaker_open_s * 1000),
    )


def chunk_policy(settings: DispatcherSettings) -> ChunkPolicy:
    """How a streamed answer's tokens are batched into chunks (``INFERQ_DISPATCHER_STREAM_CHUNK_*``)."""
    return ChunkPolicy(
        tokens=settings.stream_chunk_tokens,
        linger_ms=settings.stream_chunk_linger_ms,
        chars=settings.stream_chunk_chars,
    )


def build_schedule(settings: DispatcherSettings) -> Schedule:
    """The schedule file or the built-in table, with the settings' pin and LOW peak ceiling applied."""
    if settings.schedule_file is not None:
        schedule = Schedule.from_toml(settings.schedule_file, budget=settings.budget)
    else:
        schedule = Schedule.default(budget=settings.budget, timezone=settings.timezone)
    if settings.low_peak_ceiling is not None:
        windows = []
        for window in schedule.windows:
            if window.name == "peak":
                low = window.limits[Tier.LOW]
                lifted = TierLimits(low.floor, max(low.floor, settings.low_peak_ceiling))
                window = replace(window, limits={**window.limits, Tier.LOW: lifted})
            windows.append(window)
        schedule = replace(schedule, windows=tuple(windows))
    return schedule.pin(settings.schedule_pin) if settings.schedule_pin else schedule


# Every settings class the dispatcher reads (its `--help` and `inferq config show` list their variables).
READ_BY_DISPATCHER: tuple[type[BaseSettings], ...] = (
    DispatcherSettings,
    HttpLimits,
    ReadinessSettings,
    LogSettings,
)
