"""Topic administration: idempotent creation and the start-up check every service runs."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from services.messaging.errors import MessagingError, MissingTopicsError
from services.messaging.kafka_config import KafkaSettings

ADMIN_TIMEOUT_S = 15.0


def create_topics(settings: KafkaSettings, *, timeout_s: float = ADMIN_TIMEOUT_S) -> dict[str, str]:
    """Create every topic of the table; existing ones are left alone. Returns name → outcome."""
    admin = AdminClient(settings.admin_config())
    specs = settings.topics.specs()
    new = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=1, config=s.config()) for s in specs
    ]
    outcome: dict[str, str] = {}
    futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            outcome[name] = "created"
        except KafkaException as exc:
            err = exc.args[0]
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                outcome[name] = "exists"
            else:
                raise MessagingError(f"cannot create topic {name}: {err}") from exc
    return outcome


def existing_topics(settings: KafkaSettings, *, timeout_s: float = ADMIN_TIMEOUT_S) -> set[str]:
    admin = AdminClient(settings.admin_config())
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise MessagingError(
            f"Kafka at {settings.bootstrap_servers} did not answer within {timeout_s:.0f} s: {exc}"
        ) from exc
    return set(metadata.topics)


def require_topics(settings: KafkaSettings, needed: list[str], *, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    """Raise `MissingTopicsError` naming every topic in `needed` that the broker lacks."""
    missing = [t for t in needed if t not in existing_topics(settings, timeout_s=timeout_s)]
    if missing:
        raise MissingTopicsError(missing, settings.bootstrap_servers)
