"""Dispatcher settings: env prefix ``INFERQ_``; Kafka under ``INFERQ_KAFKA_``, Redis under
``INFERQ_REDIS_``."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inferq.dispatcher.backend_specs import BackendSpec, backend_url, check_backends
from inferq.dispatcher.circuit import BreakerPolicy
from inferq.dispatcher.rate_budget import MAX_COUNT, RateLimit
from inferq.dispatcher.routing import DEFAULT_BACKEND, check_tier_backends
from inferq.dispatcher.schedule import Schedule, TierLimits
from inferq.dispatcher.streaming import ChunkPolicy
from inferq.dispatcher.tokens.settings import RedisBudgetSettings
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, DEFAULT_SCENARIO_TIERS, Tier, complete_per_tier
from inferq.tenancy.settings import TenancySettings


class ModelRateLimit(BaseModel):
    """One model's limits per minute in INFERQ_RATE_LIMITS; unset: not limited (unless learned)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    tpm: int | None = Field(default=None, ge=1, le=MAX_COUNT)


def _default_dispatcher_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class DispatcherSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERQ_", extra="ignore")

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    # INFERQ_TENANTS_FILE (ingest's and results' file): the tenants whose Kafka records run, their
    # entitlements, weights and caps; unset: open mode, every tenant accepted with the global rules.
    tenants: TenancySettings = Field(default_factory=TenancySettings)
    group_id: str = "inferq-dispatcher"
    dispatcher_id: str = Field(default_factory=_default_dispatcher_id)
    # The LLM API's concurrency limit, shared by the whole dispatcher group.
    budget: int = Field(default=10, ge=1, le=10_000)
    # inferq: tiered and work-conserving; static: the default peak split 6/3/1 as hard caps; fifo: one queue.
    policy: Literal["inferq", "static", "fifo"] = "inferq"
    # A TOML schedule (see infra/schedule.toml); None: the built-in table scaled to the budget.
    schedule_file: Path | None = None
    # Force one window by name ("peak", "normal", "night"), e.g. for tests and load tests.
    schedule_pin: str | None = None
    timezone: str = "UTC"
    # Lift LOW's ceiling in the peak window (infra/schedule.toml caps it at 1) so briefs borrow idle capacity.
    low_peak_ceiling: int | None = Field(default=None, ge=0)
    # Requests held in memory per tier beyond those running; past it the tier's partitions pause.
    # None: twice the budget, at least 20 (enough to keep every slot fed between fetches).
    readahead_per_tier: int | None = Field(default=None, ge=1, le=100_000)

    @property
    def readahead(self) -> int:
        return self.readahead_per_tier or max(20, 2 * self.budget)

    # A LOW request waiting longer than this is served as if MEDIUM.
    promotion_age_s: float = Field(default=1800.0, gt=0)
    # Drop a request whose remaining time is below its tier's typical inference time.
    early_drop: bool = True
    typical_latency_s: dict[Tier, float] = Field(default_factory=lambda: dict(DEFAULT_MEAN_LATENCY_S))
    # Learn each tier's typical call time from its completed calls (EWMA from typical_latency_s,
    # bounded to [/4, x4] of it; services/dispatcher/call_times.py); early drop uses the learned one.
    learn_latency: bool = True
    # A tier may borrow a slot past its ceiling (or into the HIGH headroom) when the forecast of the
    # higher tiers' arrivals over the call's expected time leaves them free slots
    # (services/dispatcher/forecast.py); never into HIGH's headroom. Off: the schedule's ceilings alone.
    forecast_lending: bool = True
    # Shed waiting LOW (answered EVICTED) while HIGH or MEDIUM is over its backlog capacity.
    evict_low_under_pressure: bool = False
    # Backlog capacity per tier for that; unset tiers: budget x 60% of the deadline / typical latency.
    pressure_capacity: dict[Tier, int] = Field(default_factory=dict)
    # How often waiting read-ahead is checked for expiry and aging.
    housekeeping_interval_s: float = Field(default=0.25, gt=0)
    adaptive: bool = True
    adaptive_window_s: float = Field(default=5.0, gt=0)
    adaptive_min_budget: int = Field(default=1, ge=1)
    # local: this process alone holds the budget; redis: the group shares it through Redis leases.
    coordination: Literal["local", "redis"] = "local"
    # Where and how (INFERQ_REDIS_URL, _PASSWORD, _KEY_PREFIX, _LEASE_TTL_S, _CALL_TIMEOUT_S).
    redis: RedisBudgetSettings = Field(default_factory=RedisBudgetSettings)
    # Attempts in all for a retryable failure (timeout, connection error, 429, 5xx); then dead letter.
    max_attempts: int = Field(default=3, ge=1, le=20)
    retry_base_backoff_s: float = Field(default=0.5, gt=0)
    retry_max_backoff_s: float = Field(default=30.0, gt=0)
    # Scenario → tier, as ingest's (INFERQ_INGEST_SCENARIO_TIERS is read too, so one variable sets both):
    # a record on the retry topic is never served above its scenario's tier (record_rules.py).
    scenario_tiers: dict[str, Tier] = Field(
        default_factory=lambda: dict(DEFAULT_SCENARIO_TIERS),
        validation_alias=AliasChoices(
            "scenario_tiers", "INFERQ_SCENARIO_TIERS", "INFERQ_INGEST_SCENARIO_TIERS"
        ),
    )
    # Above this share of undecodable records on a topic (60 s window) the dispatcher logs an error.
    poison_alarm_ratio: float = Field(default=0.2, gt=0, le=1)
    backend_url: str = "http://127.0.0.1:8780/v1"
    backend_api_key: SecretStr | None = None
    # Upper bound of one backend call; the remaining deadline bounds it further.
    backend_timeout_s: float = Field(default=120.0, gt=0)
    # Backends beside INFERQ_BACKEND_URL's ("default"), by name, and per tier the order to call
    # them in, e.g. '{"LOW": ["cheap", "default"]}'; unset tiers call "default" alone
    # (services/dispatcher/backend_specs.py, routing.py).
    backends: dict[str, BackendSpec] = Field(default_factory=dict, max_length=32)
    tier_backends: dict[Tier, list[str]] = Field(default_factory=dict)
    # A tier's backend is passed over (circuit open) after this many failed calls in a row (5xx,
    # timeout, lost connection) or this many 429s within the window; after the pause one probe call
    # at a time tries it again (services/dispatcher/circuit.py). Only with several backends.
    breaker_failures: int = Field(default=5, ge=1, le=10_000)
    breaker_storm_429: int = Field(default=20, ge=1, le=100_000)
    breaker_storm_window_s: float = Field(default=10.0, gt=0, le=3600)
    breaker_open_s: float = Field(default=10.0, gt=0, le=3600)
    # After its first token (written at once), a streamed answer's tokens go to the reply topic as one
    # chunk per this many tokens, or once the oldest waiting token is this old, whichever comes first
    # (services/dispatcher/streaming.py).
    stream_chunk_tokens: int = Field(default=8, ge=1, le=10_000)
    stream_chunk_linger_ms: float = Field(default=5.0, ge=0, le=10_000)
    # Requests and tokens per minute per backend model, e.g. '{"inferq-fast": {"rpm": 500, "tpm":
    # 90000}}'; the backend's x-ratelimit-* headers teach them too, the lower one holding
    # (services/dispatcher/rate_budget.py). Unset and no headers: only the concurrency budget. With
    # coordination "redis" the group shares each minute (services/dispatcher/shared_rate/).
    rate_limits: dict[str, ModelRateLimit] = Field(default_factory=dict)
    model_fast: str = "inferq-fast"
    model_accurate: str = "inferq-accurate"
    model_cheap: str = "inferq-cheap"
    commit_interval_s: float = Field(default=0.2, gt=0)
    # Group membership (classic protocol, aiokafka): a member silent this long is declared dead and
    # its partitions move. 2 s (Kafka's client default is 45 s, aiokafka's 10 s) brings the takeover
    # of a SIGKILLed dispatcher to about 2.5 s; the broker must allow it (group.min.session.timeout.ms,
    # 6 s by default, at most this). The trade-off is in docs/deployment.md.
    session_timeout_ms: int = Field(default=2_000, ge=500, le=300_000)
    # A quarter of the session: three heartbeats may be lost or late before the member is dropped.
    heartbeat_interval_ms: int = Field(default=500, ge=100, le=100_000)
    # On SIGTERM, in-flight calls get this long to finish before their outcome is left to the next owner.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    # While more than one tenant is active (work waiting or running, or a request enqueued within
    # the window), a tenant holding its weighted share of the budget may not take the last this many
    # free tokens, and others take them for HIGH only (services/dispatcher/tenant_headroom.py);
    # 0 turns it off.
    tenant_headroom_slots: int = Field(default=2, ge=0, le=10_000)
    tenant_active_window_s: float = Field(default=10.0, ge=0, le=86_400)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 8702

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
                    f"with several backends INFERQ_RATE_LIMITS names each model <backend>/<model>: "
                    f"{unnamed} name no backend (known: {sorted(known)})"
                )
        return self

    @field_validator("backend_url")
    @classmethod
    def _backend_url_without_credentials(cls, value: str) -> str:
        return backend_url(value, key_setting="INFERQ_BACKEND_API_KEY")

    @field_validator("typical_latency_s")
    @classmethod
    def _every_tier_keeps_a_latency(cls, value: dict[Tier, float]) -> dict[Tier, float]:
        # '{"HIGH": 0.05}' changes HIGH only; early drop and eviction read every tier.
        return complete_per_tier(DEFAULT_MEAN_LATENCY_S, value, "typical latency (s)")


# Variables read by earlier versions under another name: set, they would be ignored without a word.
RENAMED_VARIABLES = {"INFERQ_LEASE_TTL_S": "INFERQ_REDIS_LEASE_TTL_S"}


def renamed_variables_in(environ: Mapping[str, str]) -> list[str]:
    """A line per variable of `environ` that is no longer read, naming the one to use instead."""
    return [f"{old} is no longer read: use {new}" for old, new in RENAMED_VARIABLES.items() if old in environ]


def rate_limits(settings: DispatcherSettings) -> dict[str, RateLimit]:
    """The configured limits per model (``INFERQ_RATE_LIMITS``) as the rate budget reads them."""
    return {model: RateLimit(rpm=limit.rpm, tpm=limit.tpm) for model, limit in settings.rate_limits.items()}


def breaker_policy(settings: DispatcherSettings) -> BreakerPolicy:
    """When a backend's circuit opens and how long it stays open (``INFERQ_BREAKER_*``)."""
    return BreakerPolicy(
        failures=settings.breaker_failures,
        storm_429=settings.breaker_storm_429,
        storm_window_ms=round(settings.breaker_storm_window_s * 1000),
        open_ms=round(settings.breaker_open_s * 1000),
    )


def chunk_policy(settings: DispatcherSettings) -> ChunkPolicy:
    """How a streamed answer's tokens are batched into chunks (``INFERQ_STREAM_CHUNK_*``)."""
    return ChunkPolicy(tokens=settings.stream_chunk_tokens, linger_ms=settings.stream_chunk_linger_ms)


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
