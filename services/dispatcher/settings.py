"""Dispatcher settings (env prefix ``INFERQ_``; Kafka settings under ``INFERQ_KAFKA_``)."""

from __future__ import annotations

import os
import socket

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.messaging.kafka_config import KafkaSettings


def _default_dispatcher_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class DispatcherSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="INFERQ_", extra="ignore")

    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    group_id: str = "inferq-dispatcher"
    dispatcher_id: str = Field(default_factory=_default_dispatcher_id)
    # The LLM API's concurrency limit: calls in flight from this dispatcher never exceed it.
    budget: int = Field(default=10, ge=1, le=10_000)
    # Requests held in memory per tier beyond those running; past it the tier's partitions pause.
    readahead_per_tier: int = Field(default=20, ge=1, le=10_000)
    backend_url: str = "http://127.0.0.1:8780/v1"
    backend_api_key: SecretStr | None = None
    # Upper bound of one backend call; the remaining deadline bounds it further.
    backend_timeout_s: float = Field(default=120.0, gt=0)
    model_fast: str = "inferq-fast"
    model_accurate: str = "inferq-accurate"
    model_cheap: str = "inferq-cheap"
    commit_interval_s: float = Field(default=0.2, gt=0)
    # On SIGTERM, in-flight calls get this long to finish before their outcome is left to the next owner.
    drain_timeout_s: float = Field(default=30.0, ge=0)
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 8702
