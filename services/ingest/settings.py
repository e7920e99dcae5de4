"""Ingest settings (env prefix ``INFERQ_INGEST_``; Kafka settings under ``INFERQ_KAFKA_``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.messaging.kafka_config import KafkaSettings
from services.messaging.tiers import DEFAULT_DEADLINES_MS, DEFAULT_SCENARIO_TIERS, Tier


class IngestSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERQ_INGEST_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8700
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    max_body_bytes: int = 1_048_576
    # Bounded wait for the broker's acknowledgement: past it the client gets 503, not a hang.
    produce_timeout_s: float = 5.0
    scenario_tiers: dict[str, Tier] = Field(default_factory=lambda: dict(DEFAULT_SCENARIO_TIERS))
    deadlines_ms: dict[Tier, int] = Field(default_factory=lambda: dict(DEFAULT_DEADLINES_MS))
    # Recent client-supplied request ids remembered so a resend is answered without a second record.
    idempotency_cache_size: int = 100_000
    region: str = "local"
