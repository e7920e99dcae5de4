"""Topic administration: idempotent creation and the start-up check every service runs.

Creation is idempotent and brings an existing request topic up to the table too: its
`message.timestamp.type` is set to LogAppendTime (`TopicSpec.timestamp_type`; the dispatcher bounds
`created_at_ms` by the broker's append time). Other settings of an existing topic are left alone.

The start-up check (`require_topics`) is also each service's first contact with Kafka: a broker
that refuses our credentials or certificate raises `KafkaAccessError` within a second or two (see
`inferq.messaging.connection`), a broker that does not answer `MessagingError` after the timeout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from confluent_kafka.cimpl import NewTopic

from inferq.messaging.connection import ConnectionWatch
from inferq.messaging.errors import MessagingError, MissingTopicsError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.replication import Replication
from inferq.messaging.reply_topics import region_problem
from inferq.messaging.topics import LOG_APPEND_TIME, TopicSpec

ADMIN_TIMEOUT_S = 15.0
# How often a metadata wait looks at what librdkafka reported: the bound on noticing a refusal.
_WATCH_SLICE_S = 0.5


def watched_admin(settings: KafkaSettings) -> tuple[AdminClient, ConnectionWatch]:
    """An AdminClient of `settings` whose connection errors land in the returned watch."""
    watch = ConnectionWatch(settings.bootstrap_servers, settings.security)
    return AdminClient(settings.admin_config() | watch.options()), watch


def _metadata(
    admin: AdminClient, watch: ConnectionWatch, bootstrap: str, timeout_s: float
) -> tuple[set[str], list[str]]:
    """The topics the broker lets us see and the live brokers' addresses (host:port); a refusal
    raises at once, silence after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            metadata = admin.list_topics(timeout=min(_WATCH_SLICE_S, max(0.05, deadline - time.monotonic())))
        except KafkaException as exc:
            failure = exc
        else:
            return set(metadata.topics), sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values())
        # Outside the except block: a refusal is the whole story, not "during handling of" a timeout.
        if failure.args and isinstance(failure.args[0], KafkaError):
            watch.saw(failure.args[0])  # the request's own error may be the refusal
        admin.poll(0)  # serves error_cb
        watch.raise_if_refused()
        if time.monotonic() >= deadline:
            last = watch.last_error
            raise MessagingError(
                f"Kafka at {bootstrap} did not answer within {timeout_s:.0f} s: "
                f"{last.str() if last is not None else failure}"
            ) from failure


def _metadata_topics(
    admin: AdminClient, watch: ConnectionWatch, bootstrap: str, timeout_s: float
) -> set[str]:
    """The topics the broker lets us see; a refusal raises at once, silence after `timeout_s`."""
    return _metadata(admin, watch, bootstrap, timeout_s)[0]


def create_topics(
    settings: KafkaSettings,
    *,
    regions: Sequence[str] = (),
    timeout_s: float = ADMIN_TIMEOUT_S,
    replication: Replication | Callable[[int], Replication] | None = None,
) -> dict[str, str]:
    """Create every topic of the table and the reply topic of each of `regions` (configured as the
    results topic); existing ones are left alone. Returns name → outcome. `ValueError` for a region
    the reply-topic rule refuses (`inferq.messaging.reply_topics`).

    `replication` None: chosen from the number of brokers (`Replication.for_brokers`: factor 3 and
    min.insync.replicas=2 on three or more, else factor 1); a callable: chosen by it from the number
    of brokers (its `ValueError` propagates, nothing created)."""
    for region in regions:
        problem = region_problem(region)
        if problem is not None:
            raise ValueError(problem)
    admin, watch = watched_admin(settings)
    _, brokers = _metadata(admin, watch, settings.bootstrap_servers, timeout_s)  # refused: fail fast
    if replication is None:
        chosen = Replication.for_brokers(len(brokers))
    elif isinstance(replication, Replication):
        chosen = replication
    else:
        chosen = replication(len(brokers))
    specs = settings.topics.specs() + [s for r in regions for s in settings.topics.regional_specs(r)]
    new = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=chosen.factor,
            config=s.config() | chosen.topic_config(),
        )
        for s in specs
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
    existing = [s for s in specs if outcome.get(s.name) == "exists" and s.timestamp_type is not None]
    outcome |= _set_timestamp_types(admin, existing, timeout_s)
    created = [name for name, done in outcome.items() if done == "created"]
    if created:
        deadline = time.monotonic() + timeout_s
        # Each broker answers for itself: a fresh client's first metadata comes from its bootstrap.
        for address in brokers:
            one = AdminClient(settings.admin_config() | {"bootstrap.servers": address})
            _await_listed(one, created, address, deadline)
    return outcome


def _set_timestamp_types(admin: AdminClient, specs: Sequence[TopicSpec], timeout_s: float) -> dict[str, str]:
    """Set `message.timestamp.type` on topics that existed before (a pipeline made before request
    topics were LogAppendTime); a broker that refuses says why in the outcome, nothing raises."""
    if not specs:
        return {}
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            s.name,
            incremental_configs=[
                ConfigEntry(
                    "message.timestamp.type",
                    s.timestamp_type,
                    incremental_operation=AlterConfigOpType.SET,
                )
            ],
        )
        for s in specs
    ]
    outcome: dict[str, str] = {}
    futures = admin.incremental_alter_configs(resources, request_timeout=timeout_s)
    for resource, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            outcome[resource.name] = f"exists (message.timestamp.type set to {LOG_APPEND_TIME})"
        except KafkaException as exc:
            outcome[resource.name] = f"exists (message.timestamp.type not set: {exc.args[0]})"
        except TimeoutError:
            outcome[resource.name] = "exists (message.timestamp.type not set: no answer in time)"
    return outcome


def _await_listed(admin: AdminClient, names: Sequence[str], bootstrap: str, deadline: float) -> None:
    """Wait until `admin`'s metadata lists every topic of `names` with a leader for each partition.

    The controller acknowledges a creation before every broker's metadata has it: on a cluster, a
    service started at once could be told a topic is missing (its start-up check) by another node,
    so `create_topics` asks each broker in turn.
    """
    waiting = set(names)
    while waiting:
        try:
            metadata = admin.list_topics(timeout=_WATCH_SLICE_S)
        except KafkaException:
            pass
        else:
            for name in list(waiting):
                topic = metadata.topics.get(name)
                if (
                    topic is not None
                    and topic.error is None
                    and topic.partitions
                    and all(p.leader >= 0 for p in topic.partitions.values())
                ):
                    waiting.discard(name)
        if waiting and time.monotonic() >= deadline:
            raise MessagingError(
                f"Kafka at {bootstrap} created {', '.join(sorted(waiting))} but does not list "
                "them with a leader for each partition yet"
            )
        if waiting:
            time.sleep(0.1)


def existing_topics(settings: KafkaSettings, *, timeout_s: float = ADMIN_TIMEOUT_S) -> set[str]:
    """The topics visible to us (with ACLs: those we may at least describe)."""
    admin, watch = watched_admin(settings)
    return _metadata_topics(admin, watch, settings.bootstrap_servers, timeout_s)


def require_topics(settings: KafkaSettings, needed: list[str], *, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    """Raise `MissingTopicsError` naming every topic in `needed` that the broker lacks (one metadata
    request, whatever `needed` holds)."""
    existing = existing_topics(settings, timeout_s=timeout_s)
    missing = [t for t in needed if t not in existing]
    if missing:
        principal = settings.security.principal if settings.security.uses_tls else None
        raise MissingTopicsError(missing, settings.bootstrap_servers, principal=principal)
