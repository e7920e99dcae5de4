"""A throwaway broker: a fresh home, free ports, started for one block and stopped after it.

What the test fixture and the benchmarks both need: a broker nobody else uses, in a home of its own
(a reused home formatted for another cluster fails with "Invalid cluster.id"), on ports picked free
just before the start. Another process can take a picked port before the broker binds it, so a
port clash (`PortInUseError`) is retried on newly picked ports a few times. With
``security=sasl_ssl`` the broker is secured (see `inferq.tools.broker.security`): its CA and
users are made in its fresh home.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferq.tools.broker.broker import BrokerConfig, LocalBroker, pick_free_ports
from inferq.tools.broker.cluster import LocalCluster
from inferq.tools.broker.errors import PortInUseError
from inferq.tools.broker.security import BrokerSecurity

PORT_ATTEMPTS = 3
START_TIMEOUT_S = 180.0  # generous: a cold 2-core machine may also be compiling or fetching jars


@contextmanager
def broker_on_free_ports(
    parent: Path,
    *,
    timeout_s: float = START_TIMEOUT_S,
    keep_home: bool = False,
    security: BrokerSecurity = BrokerSecurity.PLAINTEXT,
    heap: str = "1g",
) -> Iterator[LocalBroker]:
    """A started `LocalBroker` in a new home under `parent`; stopped when the block ends, and its
    home deleted unless `keep_home` (its logs are then there to read). `heap`: the JVM's -Xmx."""
    parent.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="kafka-", dir=parent))
    try:
        broker = _start(home, timeout_s, security, heap)
        try:
            yield broker
        finally:
            broker.stop()
    finally:
        if not keep_home:
            shutil.rmtree(home, ignore_errors=True)


def _start(home: Path, timeout_s: float, security: BrokerSecurity, heap: str) -> LocalBroker:
    attempt = 1
    while True:
        port, controller_port, ssl_port = pick_free_ports(3)
        config = BrokerConfig(
            home=home,
            port=port,
            controller_port=controller_port,
            security=security,
            ssl_port=ssl_port,
            heap=heap,
        )
        broker = LocalBroker(config)
        try:
            broker.start(timeout_s=timeout_s)
        except PortInUseError:
            if attempt == PORT_ATTEMPTS:
                raise
            attempt += 1  # someone took a just-picked port; pick again
        else:
            return broker


@contextmanager
def cluster_on_free_ports(
    parent: Path,
    *,
    nodes: int = 3,
    heap: str = "512m",
    timeout_s: float = START_TIMEOUT_S,
    keep_home: bool = False,
) -> Iterator[LocalCluster]:
    """A started `LocalCluster` of `nodes` in a new home under `parent`, on free ports; stopped when
    the block ends, its home deleted unless `keep_home`."""
    parent.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="kafka-cluster-", dir=parent))
    try:
        attempt = 1
        while True:
            shutil.rmtree(home, ignore_errors=True)
            cluster = LocalCluster.open(home, nodes=nodes, heap=heap)
            try:
                cluster.start(timeout_s=timeout_s)
            except PortInUseError:
                if attempt == PORT_ATTEMPTS:
                    raise
                attempt += 1  # someone took a just-picked port; a new layout picks again
            else:
                break
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        if not keep_home:
            shutil.rmtree(home, ignore_errors=True)
