"""What each service may do on the broker, as Kafka ACLs for one pipeline (one topic prefix).

With an authorizer and ``allow.everyone.if.no.acl.found=false`` a principal may do only what an ACL
allows. `service_grants` is the least each service needs; `apply_grants` creates them (idempotent:
creating an ACL that exists is a no-op). ``inferq acls apply`` runs both.

=============  ===========================================================================
ingest         WRITE the request topics (``<prefix>.requests.*``); DESCRIBE the dispatcher
               group, whose committed offsets are the backlog admission weighs; READ the reply
               topics (``<prefix>.results`` and ``<prefix>.results.*``) and the chunk topics
               (``<prefix>.chunks`` and ``<prefix>.chunks.*``), followed without a group for the
               outcomes and the streamed chunks of chat completions
dispatcher     READ the request topics and ``<prefix>.retry`` in its group (READ on the group);
               WRITE ``<prefix>.results`` and ``<prefix>.results.*`` (regional reply topics, a
               ``reply_to``), their chunk topics ``<prefix>.chunks`` and ``<prefix>.chunks.*``,
               ``<prefix>.retry`` and ``<prefix>.dlq``
results        READ ``<prefix>.results`` in its group (and without one, to wake waiting callers);
               READ ``<prefix>.chunks`` and ``<prefix>.chunks.*`` without a group, while an event
               stream is open; WRITE ``<prefix>.dlq`` (webhooks that could not be delivered)
=============  ===========================================================================

A results service may serve one region or all (``inferq results --region``): ``results`` also
READs ``<prefix>.results.*`` (the regional reply topics) in the group of such a service,
``<group>-<region>`` or ``<group>-all`` (READ on the group prefix ``<group>-``).

READ and WRITE imply DESCRIBE in Kafka, so metadata and offsets of those topics come with them.
An idempotent producer needs no cluster ACL since Kafka 3.0 (KIP-679: WRITE on a topic suffices).
Topics are created by an administrator (a super user), never by the services.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from confluent_kafka import KafkaException

# Public API of confluent_kafka.admin, but re-exported without `__all__`, so mypy sees them as private.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from inferq.messaging.admin import existing_topics, watched_admin
from inferq.messaging.errors import MessagingError
from inferq.messaging.kafka_config import KafkaSettings
from inferq.messaging.topics import TopicNames

ACL_TIMEOUT_S = 15.0
_ENFORCED_POLL_S = 0.1


class Operation(StrEnum):
    READ = "READ"
    WRITE = "WRITE"
    DESCRIBE = "DESCRIBE"


class Resource(StrEnum):
    TOPIC = "TOPIC"
    GROUP = "GROUP"


@dataclass(frozen=True, slots=True)
class Grant:
    """One ALLOW rule: `principal` may `operation` the `resource` named `name` (or every name that
    starts with it, when `prefixed`), from any host."""

    principal: str
    operation: Operation
    resource: Resource
    name: str
    prefixed: bool = False

    def __post_init__(self) -> None:
        if not self.principal.startswith("User:") or len(self.principal) == len("User:"):
            raise ValueError(f"a principal looks like User:<name>, got {self.principal!r}")
        if not self.name:
            raise ValueError("a grant needs a resource name")

    def binding(self) -> AclBinding:
        return AclBinding(
            ResourceType[self.resource.value],
            self.name,
            ResourcePatternType.PREFIXED if self.prefixed else ResourcePatternType.LITERAL,
            self.principal,
            "*",
            AclOperation[self.operation.value],
            AclPermissionType.ALLOW,
        )

    def __str__(self) -> str:
        pattern = f"{self.name}*" if self.prefixed else self.name
        return f"{self.principal:24} {self.operation.value:8} {self.resource.value.lower():5} {pattern}"


@dataclass(frozen=True, slots=True)
class ServicePrincipals:
    """Who each service is (their SASL user names or certificate CNs) and the consumer groups."""

    ingest: str = "ingest"
    dispatcher: str = "dispatcher"
    results: str = "results"
    dispatcher_group: str = "inferq-dispatcher"
    results_group: str = "inferq-results"


def service_grants(topics: TopicNames, who: ServicePrincipals) -> list[Grant]:
    """The ACLs of the pipeline `topics`: the least each service needs (module docstring)."""
    ingest, dispatcher, results = (f"User:{name}" for name in (who.ingest, who.dispatcher, who.results))
    requests = f"{topics.prefix}.requests."
    topic, group = Resource.TOPIC, Resource.GROUP
    read, write, describe = Operation.READ, Operation.WRITE, Operation.DESCRIBE
    return [
        Grant(ingest, write, topic, requests, prefixed=True),
        Grant(ingest, describe, group, who.dispatcher_group),
        # The outcomes of chat completions, followed with no group (so no group ACL).
        Grant(ingest, read, topic, topics.results),
        Grant(ingest, read, topic, f"{topics.results}.", prefixed=True),
        Grant(ingest, read, topic, topics.chunks),
        Grant(ingest, read, topic, f"{topics.chunks}.", prefixed=True),
        Grant(dispatcher, read, topic, requests, prefixed=True),
        Grant(dispatcher, read, topic, topics.retry),
        Grant(dispatcher, write, topic, topics.retry),
        Grant(dispatcher, write, topic, topics.results),
        # The prefix ends with the dot: <prefix>.results.eu, never <prefix>.resultsfoo.
        Grant(dispatcher, write, topic, f"{topics.results}.", prefixed=True),
        Grant(dispatcher, write, topic, topics.chunks),
        Grant(dispatcher, write, topic, f"{topics.chunks}.", prefixed=True),
        Grant(dispatcher, write, topic, topics.dlq),
        Grant(dispatcher, read, group, who.dispatcher_group),
        # Webhooks the results service could not deliver.
        Grant(results, write, topic, topics.dlq),
        Grant(results, read, topic, topics.results),
        Grant(results, read, topic, f"{topics.results}.", prefixed=True),
        # Streamed answers' chunks, read with no group while an /events stream is open.
        Grant(results, read, topic, topics.chunks),
        Grant(results, read, topic, f"{topics.chunks}.", prefixed=True),
        Grant(results, read, group, who.results_group),
        # The groups of regional results services: <group>-eu, <group>-all (results settings).
        Grant(results, read, group, f"{who.results_group}-", prefixed=True),
    ]


def apply_grants(
    settings: KafkaSettings, grants: Iterable[Grant], *, timeout_s: float = ACL_TIMEOUT_S
) -> int:
    """Create the ACLs of `grants` with `settings` (an administrator's) and wait until the broker
    enforces them. Returns how many there are.

    The controller commits an ACL before the broker has applied it; a client let in a moment too
    early is refused, and an idempotent producer refused its producer id stays broken (a fatal
    error). So this returns only once the broker lists every one of them.
    Raises `KafkaAccessError` when the broker refuses our credentials, `MessagingError` otherwise.
    """
    bindings = [grant.binding() for grant in grants]
    existing_topics(settings, timeout_s=timeout_s)  # a refused login fails here, fast and clearly
    admin, _ = watched_admin(settings)
    futures = admin.create_acls(bindings, request_timeout=timeout_s)
    for binding, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise MessagingError(f"cannot create ACL {binding}: {exc.args[0]}") from exc
    _wait_until_enforced(admin, set(bindings), timeout_s)
    return len(bindings)


def _wait_until_enforced(admin: AdminClient, bindings: set[AclBinding], timeout_s: float) -> None:
    # None matches any name, principal and host (confluent-kafka's documented filter; its stubs say str).
    anything: Any = None
    everything = AclBindingFilter(
        ResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        anything,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    deadline = time.monotonic() + timeout_s
    missing = bindings
    while time.monotonic() < deadline:
        try:
            listed = admin.describe_acls(everything, request_timeout=timeout_s).result(timeout=timeout_s)
        except KafkaException as exc:
            raise MessagingError(f"cannot list the broker's ACLs: {exc.args[0]}") from exc
        missing = bindings - set(listed)
        if not missing:
            return
        time.sleep(_ENFORCED_POLL_S)  # no event says the broker applied them: poll, bounded
    raise MessagingError(
        f"{len(missing)} ACLs created but not enforced by the broker within {timeout_s:.0f} s"
    )
