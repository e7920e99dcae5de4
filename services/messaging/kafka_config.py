"""Typed Kafka settings, turned into client kwargs only at the edge.

One object for every service: the bootstrap list (``KAFKA_BOOTSTRAP_SERVERS`` is honoured, as
every Kafka tool does), the topic prefix, the transport security (`security`, one block for both
clients: TLS, SASL/SCRAM, secrets as `SecretStr`; see `inferq.messaging.security`), and a
librdkafka pass-through for anything else. The returned dicts are new on every call, so no caller
can mutate another's configuration.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from inferq.messaging.security import KafkaSecurity
from inferq.messaging.topics import TopicNames


class KafkaSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="INFERQ_KAFKA_",
        extra="ignore",
        populate_by_name=True,
        hide_input_in_errors=True,
        use_attribute_docstrings=True,
    )

    bootstrap_servers: str = Field(
        default="127.0.0.1:9092",
        validation_alias=AliasChoices("INFERQ_KAFKA_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS"),
    )
    """The brokers, host:port comma-separated (KAFKA_BOOTSTRAP_SERVERS is read too)."""
    topic_prefix: str = Field(default="inferq", validation_alias=AliasChoices("INFERQ_TOPIC_PREFIX"))
    """The first word of every topic's name (<prefix>.requests.high, ...): pipelines sharing a
    cluster use different ones."""
    security: KafkaSecurity = Field(default_factory=KafkaSecurity)
    """Read from its own INFERQ_KAFKA_* variables (security_protocol, sasl_*, ssl_*)."""
    extra: dict[str, str] = Field(default_factory=dict)
    """librdkafka pass-through (JSON object in INFERQ_KAFKA_EXTRA) for options we do not model."""

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    def _librdkafka_common(self) -> dict[str, Any]:
        conf: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        conf.update(self.security.librdkafka_options())
        conf.update(self.extra)
        return conf

    def admin_config(self) -> dict[str, Any]:
        return self._librdkafka_common()

    def producer_config(self, *, client_id: str, linger_ms: int = 1) -> dict[str, Any]:
        """An idempotent, acks=all librdkafka producer: a 202 or a result means durably written."""
        conf = self._librdkafka_common()
        conf.update(
            {
                "client.id": client_id,
                # No duplicates or reordering from internal retries; implies acks=all.
                "enable.idempotence": True,
                "acks": "all",
                # Interactive traffic: a millisecond of batching, not librdkafka's 5 ms default.
                "linger.ms": linger_ms,
                # A produce that cannot reach the broker fails in bounded time, so ingest answers 503.
                "message.timeout.ms": 10_000,
                "compression.type": "lz4",
            }
        )
        return conf

    def aiokafka_config(self) -> dict[str, Any]:
        """Connection kwargs for aiokafka clients (with an `ssl.SSLContext` when TLS is on)."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.security.aiokafka_options()}
