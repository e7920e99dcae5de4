"""Ingest settings (env prefix ``INFERQ_INGEST_``; the values the dispatcher reads too under their
shared names, `inferq.settings.shared`; Kafka settings under ``INFERQ_KAFKA_``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inferq.ingest.admission import DEFAULT_QUEUE_WAIT_FRACTION, AdmissionPolicy
from inferq.ingest.tenant_shares import DEFAULT_ACTIVE_S, DEFAULT_FROM_FILL, DEFAULT_WINDOW
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.readiness import ReadinessSettings
from inferq.messaging.reply_topics import region_problem
from inferq.messaging.tiers import DEFAULT_DEADLINES_MS, Tier, complete_per_tier
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
from inferq.webhooks.settings import WebhookSettings


class IngestSettings(RenamingSettings):
    """Ingest's own settings (``INFERQ_INGEST_*``), the shared values it reads (bare ``INFERQ_*``)
    and its blocks: Kafka, the tenants file, webhooks."""

    model_config = SettingsConfigDict(
        env_prefix="INFERQ_INGEST_",
        extra="ignore",
        populate_by_name=True,
        use_attribute_docstrings=True,
        # A refused value may be a URL with a key in it: errors never quote the input.
        hide_input_in_errors=True,
    )
    # The previous release's names of values the dispatcher reads too.
    RENAMED: ClassVar[Mapping[str, str]] = {
        "INFERQ_INGEST_ADMISSION_BUDGET": "INFERQ_BUDGET",
        "INFERQ_INGEST_MEAN_LATENCY_S": "INFERQ_TYPICAL_LATENCY_S",
        "INFERQ_INGEST_SCENARIO_TIERS": "INFERQ_SCENARIO_TIERS",
        "INFERQ_INGEST_DISPATCHER_GROUP": "INFERQ_DISPATCHER_GROUP_ID",
        "INFERQ_GROUP_ID": "INFERQ_DISPATCHER_GROUP_ID",
        "INFERQ_INGEST_REGION": "INFERQ_REGION",
    }

    host: str = "127.0.0.1"
    """The address to listen on (--host); another than loopback needs a tenants file."""
    port: int = 8700
    """The port to listen on (--port)."""
    metrics_host: str | None = None
    """The address of /metrics (it names the tenants and their volumes: expose it to the scraper
    only); unset, the API's (--host)."""
    metrics_port: int = Field(default=8703, ge=0, le=65_535)
    """The port of /metrics (--metrics-port), never the API's; 0: a free port the system picks
    (logged at start)."""
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    tenants: TenancySettings = Field(default_factory=TenancySettings)
    """INFERQ_TENANTS_FILE and its reload interval, shared with the results service."""
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    """INFERQ_CALLBACK_HOSTS, INFERQ_WEBHOOK_*: the callback_url rules, shared with the results service."""
    max_body_bytes: int = Field(default=1_048_576, ge=1_024)
    """The largest request body accepted; past it 413."""
    body_timeout_s: float = Field(default=15.0, gt=0, le=600)
    """The whole body must arrive within this (else 408 and the connection is closed): a 1 MiB body
    at 1 Mbit/s takes 8 s. uvicorn itself never times out a slow body."""
    max_json_depth: int = Field(default=32, ge=4, le=256)
    """JSON bounds of a body: nesting levels (400 past them)."""
    max_json_number_chars: int = Field(default=40, ge=20, le=1_000)
    """JSON bounds of a body: characters per number (400 past them)."""
    max_record_bytes: int | None = Field(default=None, ge=1_024)
    """An explicit bound of one record (key + value); by default the producer's message.max.bytes and
    the request topics' max.message.bytes, less the framing, decide (services/ingest/record_limit.py)."""
    produce_timeout_s: float = 5.0
    """Bounded wait for the broker's acknowledgement: past it the client gets 503, not a hang."""
    scenario_tiers: ScenarioTiers
    deadlines_ms: dict[Tier, int] = Field(default_factory=lambda: dict(DEFAULT_DEADLINES_MS))
    """Each tier's default deadline in milliseconds (JSON; tiers left out keep theirs)."""
    idempotency_cache_size: int = 100_000
    """Recent client-supplied request ids remembered so a resend is answered without a second record."""
    region: str | None = Field(default=None, validation_alias="INFERQ_REGION")
    """This ingest's region: the requests' origin and, when set, their default reply topic
    <prefix>.results.<region> (`inferq topics create --region`). Unset: origin "local", results on the results
    topic."""

    model_fast: ModelFast
    model_accurate: ModelAccurate
    model_cheap: ModelCheap
    chat_models: list[str] | None = Field(default=None, max_length=1_000)
    """The OpenAI-compatible endpoint (services/ingest/chat/); its outcomes are read from this
    ingest's reply topic (`default_reply_topic`: its region's, else the results topic).
    The models `model` may name besides "inferq" (the tier's model), listed by GET /v1/models;
    unset: the tier models (INFERQ_MODEL_FAST, INFERQ_MODEL_ACCURATE, INFERQ_MODEL_CHEAP)."""
    chat_default_scenario: str = Field(default="realtime_chat", min_length=1, max_length=64)
    """The scenario of a completion that names none (X-Inferq-Scenario, metadata.inferq_scenario)."""
    embedding_default_scenario: str = Field(default="chat_embedding", min_length=1, max_length=64)
    """The scenario of an embeddings request that names none (X-Inferq-Scenario): chat_embedding
    (HIGH); memory_embedding is LOW."""
    embedding_models: list[str] = Field(default=["text-embedding-3-small"], min_length=1, max_length=1_000)
    """The models ``POST /v1/embeddings`` may name; "inferq" names the first."""
    chat_max_wait_s: float = Field(default=300.0, gt=0, le=3_600)
    """A completion's connection waits at most this long for its outcome (then 504, still queued)."""
    chat_grace_s: float = Field(default=5.0, ge=0, le=300)
    """Past the request's deadline, the dispatcher's EXPIRED is awaited this much longer."""
    chat_stream_idle_s: float = Field(default=30.0, gt=0, le=3_600)
    """A stream whose chunks stop this long (a dispatcher died mid-answer) ends with an error event."""
    max_waiters: int = Field(default=10_000, ge=1, le=1_000_000)
    """Callers waiting for outcomes at once; past it 503 with Retry-After."""

    admission_enabled: bool = True
    """Admission (services/ingest/admission.py): refuse with 429 when a tier's backlog is at capacity."""
    dispatcher_group: DispatcherGroup
    budget: Budget
    typical_latency_s: TypicalLatency
    queue_wait_fraction: float = Field(default=DEFAULT_QUEUE_WAIT_FRACTION, gt=0, lt=1)
    """Share of a tier's deadline its queue wait may use; the rest is left for inference."""
    backlog_capacity: dict[Tier, int] = Field(default_factory=dict)
    """Explicit backlog capacity per tier (records); tiers left out get budget x target wait / latency."""
    backlog_alert_ratio: float = Field(default=0.7, gt=0, le=1)
    """Fill ratio above which a tier is alerted on (warning log, gauge); 70% by default."""
    backlog_refresh_s: float = Field(default=0.5, gt=0, le=1.0)
    """How often the lag is re-read; admission must not act on a backlog older than a second."""
    backlog_timeout_s: float = Field(default=1.0, gt=0, le=30.0)
    """Bound of one lag read (all its Kafka calls); past it the backlog is unknown and requests are
    admitted."""
    tenant_share_from_fill: float = Field(default=DEFAULT_FROM_FILL, ge=0, le=1)
    """Per-tenant admission (services/ingest/tenant_shares.py): shares of a tier are enforced from
    this fill ratio up, over the tenant mix of the tier's last requests (at most this many)."""
    tenant_share_window: int = Field(default=DEFAULT_WINDOW, ge=1, le=1_000_000)
    """How many of a tier's last requests make the tenant mix of per-tenant admission."""
    tenant_share_active_s: float = Field(default=DEFAULT_ACTIVE_S, ge=0, le=86_400)
    """A tenant with a request accepted within this many seconds takes part in the split of a tier."""

    @field_validator("region")
    @classmethod
    def _a_region(cls, value: str | None) -> str | None:
        problem = None if value is None else region_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @property
    def listed_models(self) -> list[str]:
        """The models a completion may name besides "inferq": INFERQ_INGEST_CHAT_MODELS, else the
        tier models."""
        if self.chat_models is not None:
            return self.chat_models
        return [self.model_fast, self.model_accurate, self.model_cheap]

    @property
    def origin_region(self) -> str:
        """The `origin_region` of this ingest's requests."""
        return self.region or "local"

    @property
    def default_reply_topic(self) -> str:
        """Where a request that names no `reply_to` is answered: the region's reply topic, else the
        results topic."""
        topics = self.kafka.topics
        return topics.regional_results(self.region) if self.region else topics.results

    @field_validator("deadlines_ms")
    @classmethod
    def _every_tier_keeps_a_deadline(cls, value: dict[Tier, int]) -> dict[Tier, int]:
        return complete_per_tier(DEFAULT_DEADLINES_MS, value, "deadline (ms)")

    @field_validator("backlog_capacity")
    @classmethod
    def _positive_capacity(cls, value: dict[Tier, int]) -> dict[Tier, int]:
        for tier, capacity in value.items():
            if capacity < 1:
                raise ValueError(f"backlog capacity of {tier} must be >= 1")
        return value

    def admission_policy(self) -> AdmissionPolicy:
        """The admission policy these settings describe."""
        return AdmissionPolicy.from_deadlines(
            self.deadlines_ms,
            budget=self.budget,
            mean_latency_s=self.typical_latency_s,
            queue_wait_fraction=self.queue_wait_fraction,
            capacity=self.backlog_capacity,
            enabled=self.admission_enabled,
        )


# Every settings class ingest reads (its `--help` and `inferq config show` list their variables).
READ_BY_INGEST: tuple[type[BaseSettings], ...] = (IngestSettings, HttpLimits, ReadinessSettings, LogSettings)
