"""Shared fixtures: one real Kafka broker per test session (and a secured one for the security
tests), uuid topic prefixes per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from inferq.messaging.admin import create_topics
from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.broker.broker import LocalBroker
from inferq.tools.broker.fixture import kafka_bootstrap_for_tests, secured_broker_for_tests
from inferq.tools.redis.fixture import redis_url_for_tests
from tests.support.kafka import a_secured_prefix


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """KAFKA_BOOTSTRAP_SERVERS, else a testcontainers broker, else the project's local broker.

    Never skips: with no broker the tests that need one fail.
    """
    with kafka_bootstrap_for_tests(tmp_path_factory.mktemp("kafka")) as bootstrap:
        yield bootstrap


@pytest.fixture
def kafka_settings(kafka_bootstrap: str) -> KafkaSettings:
    """Settings with a fresh topic prefix, its topics created: tests never share topics."""
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:12]}")
    create_topics(settings)
    return settings


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """$INFERQ_REDIS_URL, else a fresh local redis-server for the session. Never skips."""
    with redis_url_for_tests(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture(scope="session")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A local broker with SASL_SSL (SCRAM) and mutual-TLS listeners and an authorizer, for the
    session; separate from `kafka_bootstrap`. Its users: admin (super user), ingest, dispatcher,
    results; their settings come from `LocalBroker.client_settings`. Never skips."""
    with secured_broker_for_tests(tmp_path_factory.mktemp("kafka-secured")) as broker:
        yield broker


@pytest.fixture
def secured_prefix(secured_broker: LocalBroker) -> str:
    """`a_secured_prefix` of the session's secured broker."""
    return a_secured_prefix(secured_broker)
