"""A Kafka bootstrap address for tests: an external broker, a testcontainers broker, or a local one.

Tests that need Kafka must run against a real broker or fail loudly; they never skip, because a green
run with skipped Kafka tests proves nothing.
"""

from __future__ import annotations

import gc
import importlib
import os
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from inferq.tools.broker.broker import LocalBroker
from inferq.tools.broker.cluster import LocalCluster
from inferq.tools.broker.ephemeral import broker_on_free_ports, cluster_on_free_ports
from inferq.tools.broker.errors import LocalBrokerError, NoKafkaAvailableError
from inferq.tools.broker.security import BrokerSecurity

BOOTSTRAP_ENV = "KAFKA_BOOTSTRAP_SERVERS"
_DOCKER_PING_TIMEOUT_S = 3


def _missing_docker_socket() -> str | None:
    """Why no engine can answer, when that is evident without connecting (the common case here)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None  # tcp/ssh engines can only be known by asking
    path = Path(host.removeprefix("unix://") or "/var/run/docker.sock")
    return None if path.exists() else f"no Docker engine (no socket at {path})"


def docker_engine_answers(timeout_s: int = _DOCKER_PING_TIMEOUT_S) -> tuple[bool, str]:
    """Ping the Docker engine with the docker SDK; returns (answers, reason when it does not)."""
    missing = _missing_docker_socket()
    if missing is not None:
        return False, missing
    try:
        # Imported by name: the docker SDK ships no type information, and only this probe needs it.
        docker: Any = importlib.import_module("docker")
    except ImportError as exc:
        return False, f"docker SDK not importable ({exc})"
    # The SDK leaks the socket of a failed connect; under `filterwarnings=error` its ResourceWarning
    # would fail whichever test happens to trigger garbage collection, so collect it here, silenced.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            client = docker.from_env(timeout=timeout_s)
            try:
                return bool(client.ping()), ""
            finally:
                client.close()
        # requests' errors derive from OSError; DockerException covers "no engine" from from_env().
        except (docker.errors.DockerException, OSError) as exc:
            reason = f"no Docker engine answered ({type(exc).__name__}: {exc})"
        gc.collect()
    return False, reason


@contextmanager
def _testcontainers_kafka() -> Iterator[str]:
    try:
        module = importlib.import_module("testcontainers.community.kafka")
    except ImportError:
        module = importlib.import_module("testcontainers.kafka")  # before testcontainers 4.15
    # The dispatcher's 2 s session is below Kafka's default floor (6 s); cp-kafka maps KAFKA_* variables
    # to broker settings, as our own broker's server.properties sets it.
    container = module.KafkaContainer().with_kraft().with_env("KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS", "1000")
    with container as kafka:
        yield str(kafka.get_bootstrap_server())


@contextmanager
def kafka_bootstrap_for_tests(tmp_root: Path) -> Iterator[str]:
    """Yield a ``bootstrap.servers`` string of a real Kafka broker for the duration of the block.

    In order: ``$KAFKA_BOOTSTRAP_SERVERS`` when set (nothing is started or stopped); a testcontainers
    Kafka (KRaft) when a Docker engine answers; else a fresh LocalBroker under ``tmp_root`` on free
    ports, stopped on exit. Never skips: raises NoKafkaAvailableError saying what was tried.
    """
    external = os.environ.get(BOOTSTRAP_ENV, "").strip()
    if external:
        yield external
        return
    docker_ok, docker_reason = docker_engine_answers()
    if docker_ok:
        with _testcontainers_kafka() as bootstrap:
            yield bootstrap
        return
    with ExitStack() as stack:
        try:
            # The home is kept: after a failed session its broker logs are there to read.
            bootstrap = stack.enter_context(broker_on_free_ports(tmp_root, keep_home=True)).bootstrap
        except LocalBrokerError as exc:
            raise NoKafkaAvailableError(
                f"no Kafka broker for the tests: ${BOOTSTRAP_ENV} is not set; {docker_reason}; "
                f"and the local broker failed: {exc}"
            ) from exc
        yield bootstrap  # the stack stops the broker however the block ends


@contextmanager
def secured_broker_for_tests(tmp_root: Path) -> Iterator[LocalBroker]:
    """A local broker with SASL_SSL and mutual-TLS listeners, its CA and users made in a fresh home
    under ``tmp_root``; stopped on exit. Always the project's own broker: an external or containerised
    one would not have our users, certificates and authorizer. Never skips."""
    with ExitStack() as stack:
        try:
            broker = stack.enter_context(
                broker_on_free_ports(tmp_root, keep_home=True, security=BrokerSecurity.SASL_SSL)
            )
        except LocalBrokerError as exc:
            raise NoKafkaAvailableError(f"the secured local broker failed to start: {exc}") from exc
        yield broker


@contextmanager
def kafka_cluster_for_tests(tmp_root: Path, *, nodes: int = 3, heap: str = "512m") -> Iterator[LocalCluster]:
    """A local cluster of `nodes` in a fresh home under ``tmp_root``, stopped on exit. Always the
    project's own: the cluster tests kill and restart its nodes. Never skips."""
    with ExitStack() as stack:
        try:
            cluster = stack.enter_context(
                cluster_on_free_ports(tmp_root, nodes=nodes, heap=heap, keep_home=True)
            )
        except LocalBrokerError as exc:
            raise NoKafkaAvailableError(f"the local {nodes}-node cluster failed to start: {exc}") from exc
        yield cluster
