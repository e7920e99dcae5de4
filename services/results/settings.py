"""Results service settings (env prefix ``INFERQ_RESULTS_``; Kafka under ``INFERQ_KAFKA_``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.messaging.kafka_config import KafkaSettings


class ResultsSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERQ_RESULTS_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = 8701
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    group_id: str = "inferq-results"
    db_path: Path = Path(".inferq/results.db")
