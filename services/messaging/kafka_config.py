"""Typed Kafka settings, turned into client kwargs only at the edge.

One object for every service: the bootstrap list (``KAFKA_BOOTSTRAP_SERVERS`` is honoured, as
every Kafka tool does), the topic prefix, the transport security (`security`, one block for both
clients: TLS, SASL/SCRAM, secrets as `SecretStr`; see `inferq.messaging.security`), and a
librdkafka pass-through for anything else. The returned dicts are new on every call, so no caller
can mutate another's configuration.

The pass-through (``INFERQ_KAFKA_EXTRA``) reaches the librdkafka clients only, never aiokafka's, so
it may not set what the typed settings own: a security option (``security.protocol``, ``sasl.*``,
``ssl.*``, ``enable.ssl.certificate.verification``...; `is_security_option`) or the brokers. Such an
option is refused at start, whether or not security is configured: either it would weaken the
security the settings set (certificate checks off, another protocol) or it would secure one kind of
client and not the other. The error names the option, never its value.
"""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inferq.messaging.security import KafkaSecurity, is_security_option
from inferq.messaging.topics import TopicNames
from inferq.redaction import carries_secret

# How long a chunk may take to be acknowledged before it is given up (`chunk_producer_config`).
CHUNK_TIMEOUT_MS = 2_000
# librdkafka's names for the brokers, owned by `bootstrap_servers` (aiokafka reads that one alone).
_BROKER_OPTIONS = frozenset({"bootstrap.servers", "metadata.broker.list"})


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
    """librdkafka pass-through (JSON object in INFERQ_KAFKA_EXTRA) for options we do not model;
    security options and the brokers are refused (they belong to the INFERQ_KAFKA_* settings)."""

    @field_validator("bootstrap_servers")
    @classmethod
    def _brokers_without_credentials(cls, value: str) -> str:
        # Shown in errors and logs as written; credentials belong in INFERQ_KAFKA_SASL_*.
        if carries_secret(value):
            raise ValueError("must not carry credentials: use INFERQ_KAFKA_SASL_USERNAME/PASSWORD")
        return value

    @field_validator("extra")
    @classmethod
    def _nothing_the_settings_own(cls, extra: dict[str, str]) -> dict[str, str]:
        # Named, never quoted: a refused option's value may be a password.
        security = sorted(name for name in extra if is_security_option(name))
        if security:
            raise ValueError(
                f"INFERQ_KAFKA_EXTRA may not set the security option(s) {', '.join(security)}: they would "
                "apply to the librdkafka clients only (the aiokafka ones never see them) and could weaken "
                "what INFERQ_KAFKA_SECURITY_PROTOCOL, INFERQ_KAFKA_SASL_* and INFERQ_KAFKA_SSL_* set; "
                "use those settings"
            )
        brokers = sorted(name for name in extra if name.strip().lower() in _BROKER_OPTIONS)
        if brokers:
            raise ValueError(
                f"INFERQ_KAFKA_EXTRA may not set {', '.join(brokers)}: use INFERQ_KAFKA_BOOTSTRAP_SERVERS"
            )
        return extra

    @property
    def topics(self) -> TopicNames:
        return TopicNames(self.topic_prefix)

    def _librdkafka_common(self) -> dict[str, Any]:
        # The pass-through first, so what the typed settings own is theirs even in a settings object
        # built without validation (`model_construct`).
        conf: dict[str, Any] = dict(self.extra)
        conf["bootstrap.servers"] = self.bootstrap_servers
        conf.update(self.security.librdkafka_options())
        return conf

    def admin_config(self) -> dict[str, Any]:
        return self._librdkafka_common()

    def producer_config(self, *, client_id: str, linger_ms: int = 0) -> dict[str, Any]:
        """An idempotent, acks=all librdkafka producer: a 202 or a result means durably written."""
        conf = self._librdkafka_common()
        conf.update(
            {
                "client.id": client_id,
                # No duplicates or reordering from internal retries; implies acks=all.
                "enable.idempotence": True,
                "acks": "all",
                # Interactive traffic: send at once (librdkafka's default waits 5 ms). Records that
                # come while a request is in flight still go together in the next one.
                "linger.ms": linger_ms,
                # A produce that cannot reach the broker fails in bounded time, so ingest answers 503.
                "message.timeout.ms": 10_000,
                "compression.type": "lz4",
            }
        )
        return conf

    def chunk_producer_config(self, *, client_id: str) -> dict[str, Any]:
        """The producer of streamed answers' chunks, which are transient (the result holds the whole
        answer): acknowledged by the partition leader alone (acks=1, so no wait for the replicas,
        and hence no idempotence, which needs acks=all), sent at once, uncompressed (a chunk is a
        few hundred bytes), and given up after `CHUNK_TIMEOUT_MS`: a chunk later than that is
        worth nothing to a caller reading as the model writes. docs/architecture.md ("What a chunk
        may lose") says what that costs a caller."""
        conf = self._librdkafka_common()
        conf.update(
            {
                "client.id": client_id,
                "enable.idempotence": False,
                "acks": 1,
                "linger.ms": 0,
                "message.timeout.ms": CHUNK_TIMEOUT_MS,
                "compression.type": "none",
            }
        )
        return conf

    def aiokafka_config(self) -> dict[str, Any]:
        """Connection kwargs for aiokafka clients (with an `ssl.SSLContext` when TLS is on): the same
        brokers and security as the librdkafka clients (the pass-through holds neither)."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.security.aiokafka_options()}
