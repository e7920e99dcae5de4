"""Local Apache Kafka broker tooling: the real Kafka 4.x broker (KRaft, single node) run from Maven jars.

No Docker needed: ``ensure_jars`` fetches the broker's jars once with Maven, ``LocalBroker`` formats,
starts, probes and stops a broker in a home directory, ``cli.register`` adds ``inferq broker
start|stop|status``, ``ephemeral.broker_on_free_ports`` starts a throwaway broker in a fresh home on
free ports (for the benchmarks and the test fixture) and ``fixture.kafka_bootstrap_for_tests``
gives tests a bootstrap string.
"""

from __future__ import annotations

from inferq.tools.broker.broker import BrokerConfig, BrokerStatus, LocalBroker, pick_free_ports
from inferq.tools.broker.ephemeral import broker_on_free_ports
from inferq.tools.broker.errors import (
    BrokerStartError,
    BrokerStopError,
    JarFetchError,
    LocalBrokerError,
    NoKafkaAvailableError,
    PortInUseError,
    ToolMissingError,
)
from inferq.tools.broker.jars import ensure_jars, require_java, require_maven
from inferq.tools.paths import find_project_root

__all__ = [
    "BrokerConfig",
    "BrokerStartError",
    "BrokerStatus",
    "BrokerStopError",
    "JarFetchError",
    "LocalBroker",
    "LocalBrokerError",
    "NoKafkaAvailableError",
    "PortInUseError",
    "ToolMissingError",
    "broker_on_free_ports",
    "ensure_jars",
    "find_project_root",
    "pick_free_ports",
    "require_java",
    "require_maven",
]
