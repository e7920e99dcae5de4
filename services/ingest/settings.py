"""Ingest settings (env prefix ``INFERQ_INGEST_``; Kafka settings under ``INFERQ_KAFKA_``)."""

from __future__ import annotations

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inferq.ingest.admission import (
    DEFAULT_BUDGET,
    DEFAULT_QUEUE_WAIT_FRACTION,
    AdmissionPolicy,
)
from inferq.ingest.tenant_shares import DEFAULT_ACTIVE_S, DEFAULT_FROM_FILL, DEFAULT_WINDOW
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.reply_topics import region_problem
from inferq.messaging.tiers import (
    DEFAULT_DEADLINES_MS,
    DEFAULT_MEAN_LATENCY_S,
    DEFAULT_SCENARIO_TIERS,
    Tier,
    complete_per_tier,
)
from inferq.tenancy.settings import TenancySettings
from inferq.webhooks.settings import WebhookSettings


class IngestSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERQ_INGEST_", extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    port: int = 8700
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    # INFERQ_TENANTS_FILE and its reload interval, shared with the results service.
    tenants: TenancySettings = Field(default_factory=TenancySettings)
    # INFERQ_CALLBACK_HOSTS, INFERQ_WEBHOOK_*: the callback_url rules, shared with the results service.
    webhooks: WebhookSettings = Field(default_factory=WebhookSettings)
    max_body_bytes: int = Field(default=1_048_576, ge=1_024)
    # The whole body must arrive within this (else 408 and the connection is closed): a 1 MiB body
    # at 1 Mbit/s takes 8 s. uvicorn itself never times out a slow body.
    body_timeout_s: float = Field(default=15.0, gt=0, le=600)
    # JSON bounds of a body: nesting levels and characters per number (400 past them).
    max_json_depth: int = Field(default=32, ge=4, le=256)
    max_json_number_chars: int = Field(default=40, ge=20, le=1_000)
    # An explicit bound of one record (key + value); by default the producer's message.max.bytes and
    # the request topics' max.message.bytes, less the framing, decide (services/ingest/record_limit.py).
    max_record_bytes: int | None = Field(default=None, ge=1_024)
    # Bounded wait for the broker's acknowledgement: past it the client gets 503, not a hang.
    produce_timeout_s: float = 5.0
    scenario_tiers: dict[str, Tier] = Field(default_factory=lambda: dict(DEFAULT_SCENARIO_TIERS))
    deadlines_ms: dict[Tier, int] = Field(default_factory=lambda: dict(DEFAULT_DEADLINES_MS))
    # Recent client-supplied request ids remembered so a resend is answered without a second record.
    idempotency_cache_size: int = 100_000
    # This ingest's region (INFERQ_REGION; INFERQ_INGEST_REGION is read too): the requests' origin
    # and, when set, their default reply topic <prefix>.results.<region> (`inferq topics create
    # --region`). Unset: origin "local", results on the results topic.
    region: str | None = Field(
        default=None, validation_alias=AliasChoices("INFERQ_REGION", "INFERQ_INGEST_REGION", "region")
    )

    # The OpenAI-compatible endpoint (services/ingest/chat/); its outcomes are read from this
    # ingest's reply topic (`default_reply_topic`: its region's, else the results topic).
    # The models `model` may name besides "inferq" (the tier's model), listed by GET /v1/models.
    chat_models: list[str] = Field(
        default_factory=lambda: ["inferq-fast", "inferq-accurate", "inferq-cheap"], max_length=1_000
    )
    # The scenario of a completion that names none (X-Inferq-Scenario, metadata.inferq_scenario).
    chat_default_scenario: str = Field(default="realtime_chat", min_length=1, max_length=64)
    # A completion's connection waits at most this long for its outcome (then 504, still queued).
    chat_max_wait_s: float = Field(default=300.0, gt=0, le=3_600)
    # Past the request's deadline, the dispatcher's EXPIRED is awaited this much longer.
    chat_grace_s: float = Field(default=5.0, ge=0, le=300)
    # A stream whose chunks stop this long (a dispatcher died mid-answer) ends with an error event.
    chat_stream_idle_s: float = Field(default=30.0, gt=0, le=3_600)
    # Callers waiting for outcomes at once; past it 503 with Retry-After.
    max_waiters: int = Field(default=10_000, ge=1, le=1_000_000)

    # Admission (services/ingest/admission.py): refuse with 429 when a tier's backlog is at capacity.
    admission_enabled: bool = True
    # The group whose lag is the backlog: the dispatchers' INFERQ_GROUP_ID unless set for ingest.
    dispatcher_group: str = Field(
        default="inferq-dispatcher",
        min_length=1,
        validation_alias=AliasChoices("INFERQ_INGEST_DISPATCHER_GROUP", "INFERQ_GROUP_ID"),
    )
    # The concurrency budget the backlog drains with: capacity and Retry-After scale with it.
    admission_budget: int = Field(default=DEFAULT_BUDGET, ge=1, le=10_000)
    # Expected inference time per tier; tiers left out keep their default.
    mean_latency_s: dict[Tier, float] = Field(default_factory=lambda: dict(DEFAULT_MEAN_LATENCY_S))
    # Share of a tier's deadline its queue wait may use; the rest is left for inference.
    queue_wait_fraction: float = Field(default=DEFAULT_QUEUE_WAIT_FRACTION, gt=0, lt=1)
    # Explicit backlog capacity per tier (records); tiers left out get budget x target wait / latency.
    backlog_capacity: dict[Tier, int] = Field(default_factory=dict)
    # Fill ratio above which a tier is alerted on (warning log, gauge); 70% by default.
    backlog_alert_ratio: float = Field(default=0.7, gt=0, le=1)
    # How often the lag is re-read; admission must not act on a backlog older than a second.
    backlog_refresh_s: float = Field(default=0.5, gt=0, le=1.0)
    # Bound of one lag read (all its Kafka calls); past it the backlog is unknown and requests are admitted.
    backlog_timeout_s: float = Field(default=1.0, gt=0, le=30.0)
    # Per-tenant admission (services/ingest/tenant_shares.py): shares of a tier are enforced from
    # this fill ratio up, over the tenant mix of the tier's last requests (at most this many).
    tenant_share_from_fill: float = Field(default=DEFAULT_FROM_FILL, ge=0, le=1)
    tenant_share_window: int = Field(default=DEFAULT_WINDOW, ge=1, le=1_000_000)
    # A tenant with a request accepted within this many seconds takes part in the split of a tier.
    tenant_share_active_s: float = Field(default=DEFAULT_ACTIVE_S, ge=0, le=86_400)

    @field_validator("region")
    @classmethod
    def _a_region(cls, value: str | None) -> str | None:
        problem = None if value is None else region_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

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

    @field_validator("mean_latency_s")
    @classmethod
    def _every_tier_keeps_a_latency(cls, value: dict[Tier, float]) -> dict[Tier, float]:
        return complete_per_tier(DEFAULT_MEAN_LATENCY_S, value, "mean latency (s)")

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
            budget=self.admission_budget,
            mean_latency_s=self.mean_latency_s,
            queue_wait_fraction=self.queue_wait_fraction,
            capacity=self.backlog_capacity,
            enabled=self.admission_enabled,
        )
