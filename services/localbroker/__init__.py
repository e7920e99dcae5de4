"""Local Apache Kafka broker tooling: the real Kafka 4.x broker (KRaft, single node) run from Maven jars.

No Docker needed: ``ensure_jars`` fetches the broker's jars once with Maven, ``LocalBroker`` formats,
starts, probes and stops a broker in a home directory, ``cli.register`` adds ``inferq broker
start|stop|status`` and ``fixture.kafka_bootstrap_for_tests`` gives tests a bootstrap string.
"""

from __future__ import annotations

from services.localbroker.broker import BrokerConfig, BrokerStatus, LocalBroker, pick_free_ports
from services.localbroker.errors import (
    BrokerStartError,
    BrokerStopError,
    JarFetchError,
    LocalBrokerError,
    NoKafkaAvailableError,
    PortInUseError,
    ToolMissingError,
)
from services.localbroker.jars import ensure_jars, find_project_root, require_java, require_maven

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
    "ensure_jars",
    "find_project_root",
    "pick_free_ports",
    "require_java",
    "require_maven",
]
