"""A Kafka cluster on localhost: N combined broker+controller nodes (KRaft) from the same Maven jars.

Layout of a cluster home::

    <home>/cluster.json        node count, cluster id and every node's ports, written at the first
                               start and read by every later start, stop and status
    <home>/node-<id>/          one `LocalBroker` home per node (server.properties, data/, logs/, pid)

Every node is a voter of the controller quorum and a broker; with three, the cluster keeps serving
when any one dies (a quorum of two remains, and topics with replication factor 3 and
min.insync.replicas=2 still take acks=all writes). The internal topics (consumer offsets,
transactions) are replicated on min(3, N) nodes.

A one-node home is not a cluster home: `inferq broker start` without ``--nodes`` (or ``--nodes 1``)
runs the single `LocalBroker` of `broker.py`, exactly as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from inferq.tools.broker.broker import (
    HOST,
    BrokerConfig,
    BrokerStatus,
    LocalBroker,
    new_cluster_id,
    pick_free_ports,
)
from inferq.tools.broker.errors import BrokerStartError, LocalBrokerError
from inferq.tools.paths import find_project_root
from inferq.tools.processes import wait_pid_exit

CLUSTER_FILE = "cluster.json"
MAX_NODES = 9
_METADATA_TIMEOUT_S = 10.0


class ClusterHomeError(LocalBrokerError):
    """A home that holds something else (a single broker, another node count) than asked for."""


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """What `cluster.json` remembers: the cluster id and each node's (client, controller) ports."""

    cluster_id: str
    client_ports: tuple[int, ...]
    controller_ports: tuple[int, ...]

    def __post_init__(self) -> None:
        count = len(self.client_ports)
        if not 2 <= count <= MAX_NODES or len(self.controller_ports) != count:
            raise ValueError(f"a cluster has 2 to {MAX_NODES} nodes, each with two ports; got {self}")
        ports = [*self.client_ports, *self.controller_ports]
        if len(set(ports)) != len(ports) or not all(0 < p < 65536 for p in ports):
            raise ValueError(f"cluster ports must be distinct and in 1-65535: {ports}")

    @property
    def nodes(self) -> int:
        return len(self.client_ports)

    @classmethod
    def choose(cls, nodes: int, first_port: int | None = None) -> ClusterLayout:
        """A new layout: client ports `first_port`, `first_port`+1, ... when given, else free ones;
        controller ports free ones."""
        if not 2 <= nodes <= MAX_NODES:
            raise ValueError(f"--nodes must be 1 to {MAX_NODES}, got {nodes}")
        free = pick_free_ports(2 * nodes if first_port is None else nodes)
        if first_port is None:
            clients, controllers = free[:nodes], free[nodes:]
        else:
            clients, controllers = [first_port + i for i in range(nodes)], free
        return cls(new_cluster_id(), tuple(clients), tuple(controllers))

    @classmethod
    def read(cls, home: Path) -> ClusterLayout | None:
        """The layout remembered in `home`, None when it is not a cluster home."""
        try:
            raw = json.loads((home / CLUSTER_FILE).read_text(encoding="utf-8"))
            return cls(
                str(raw["cluster_id"]),
                tuple(int(p) for p in raw["client_ports"]),
                tuple(int(p) for p in raw["controller_ports"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ClusterHomeError(f"{home / CLUSTER_FILE} is unreadable: {exc}") from exc

    def write(self, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        document = {
            "cluster_id": self.cluster_id,
            "client_ports": list(self.client_ports),
            "controller_ports": list(self.controller_ports),
        }
        (home / CLUSTER_FILE).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_id: int
    status: BrokerStatus


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """Every node's status; `running` when all of them run (a cluster missing a node is degraded)."""

    home: Path
    nodes: tuple[NodeStatus, ...]

    @property
    def running(self) -> bool:
        return all(n.status.running for n in self.nodes)

    @property
    def pid(self) -> int | None:
        return next((n.status.pid for n in self.nodes if n.status.pid is not None), None)

    @property
    def any_running(self) -> bool:
        return any(n.status.running for n in self.nodes)


@dataclass
class LocalCluster:
    """Start, probe, stop (and, for chaos tests, kill) the nodes of a cluster home."""

    home: Path
    layout: ClusterLayout
    heap: str = "1g"
    project_root: Path = field(default_factory=find_project_root)
    nodes: list[LocalBroker] = field(init=False)

    def __post_init__(self) -> None:
        self.home = Path(self.home).resolve()
        n = self.layout.nodes
        voters = ",".join(f"{i + 1}@{HOST}:{port}" for i, port in enumerate(self.layout.controller_ports))
        replication = min(3, n)
        self.nodes = [
            LocalBroker(
                BrokerConfig(
                    home=self.home / f"node-{i + 1}",
                    port=self.layout.client_ports[i],
                    controller_port=self.layout.controller_ports[i],
                    heap=self.heap,
                    project_root=self.project_root,
                    node_id=i + 1,
                    quorum_voters=voters,
                    cluster_id=self.layout.cluster_id,
                    internal_replication=replication,
                    # Writes to the offsets topic go on with one node down.
                    internal_min_isr=max(1, replication - 1),
                )
            )
            for i in range(n)
        ]

    @classmethod
    def open(
        cls,
        home: Path,
        *,
        nodes: int | None = None,
        first_port: int | None = None,
        heap: str = "1g",
        project_root: Path | None = None,
    ) -> LocalCluster:
        """The cluster of `home`: the one it remembers, or (with `nodes` >= 2) a new layout, written
        at once. Refuses a home that holds a single broker or a cluster of another size."""
        home = Path(home).resolve()
        layout = ClusterLayout.read(home)
        if layout is None:
            if nodes is None or nodes < 2:
                raise ClusterHomeError(f"{home} holds no cluster (start one with --nodes 3)")
            if (home / "server.properties").exists() or (home / "data").exists():
                raise ClusterHomeError(
                    f"{home} holds a single-node broker; stop it and start the cluster in another --home"
                )
            layout = ClusterLayout.choose(nodes, first_port)
            layout.write(home)
        elif nodes is not None and nodes != layout.nodes:
            raise ClusterHomeError(
                f"{home} holds a {layout.nodes}-node cluster, not {nodes}; use another --home"
            )
        elif first_port is not None and first_port != layout.client_ports[0]:
            raise ClusterHomeError(
                f"the cluster of {home} listens on {layout.client_ports[0]}, not {first_port}"
            )
        return cls(home, layout, heap=heap, project_root=project_root or find_project_root())

    # -- queries -------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """Every node's client address, for ``bootstrap.servers``."""
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> LocalBroker:
        return self.nodes[node_id - 1]

    def status(self) -> ClusterStatus:
        return ClusterStatus(
            self.home, tuple(NodeStatus(i + 1, node.status()) for i, node in enumerate(self.nodes))
        )

    def answers(self, timeout_s: float = 5.0) -> bool:
        """True when every node answers a metadata request."""
        return all(node.answers(timeout_s) for node in self.nodes)

    def _admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 5000})

    def brokers_seen(self) -> set[int]:
        """The node ids the cluster's metadata lists as live brokers."""
        metadata = self._admin().list_topics(timeout=_METADATA_TIMEOUT_S)
        return set(metadata.brokers)

    def leader_of(self, topic: str, partition: int) -> int:
        """The node id leading `topic`[`partition`], waiting (bounded) while a new topic's metadata
        or a leader election is still on its way."""
        admin = self._admin()
        deadline = time.monotonic() + _METADATA_TIMEOUT_S
        while True:
            described = admin.list_topics(topic, timeout=_METADATA_TIMEOUT_S).topics.get(topic)
            found = described.partitions.get(partition) if described is not None else None
            if found is not None and found.leader >= 1:
                return int(found.leader)
            if time.monotonic() > deadline:
                raise LocalBrokerError(
                    f"{topic}[{partition}] has no leader after {_METADATA_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.2)

    def fully_replicated(self, topics: list[str]) -> bool:
        """True when every partition of `topics` has all its replicas in sync."""
        try:
            metadata = self._admin().list_topics(timeout=_METADATA_TIMEOUT_S)
        except KafkaException:
            return False
        for topic in topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                return False
            for partition in described.partitions.values():
                if set(partition.isrs) != set(partition.replicas) or partition.leader < 1:
                    return False
        return True

    def active_controller(self) -> int:
        """The node id of the quorum's leader (the active controller), from the nodes' own record
        of the quorum state (``__cluster_metadata-0/quorum-state``): the newest epoch wins."""
        best: tuple[int, int] | None = None
        for node in self.nodes:
            path = node.config.data_dir / "__cluster_metadata-0" / "quorum-state"
            try:
                state = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
            if leader > 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
        if best is None:
            raise LocalBrokerError(f"no node of {self.home} records a quorum leader")
        return best[0]

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self, timeout_s: float = 180.0) -> float:
        """Start every node not running (formatting new storage with the cluster's id), then wait
        until each answers. Idempotent. Returns the seconds it took; on failure every node this call
        launched is stopped."""
        started = time.monotonic()
        deadline = started + timeout_s
        launched: list[tuple[LocalBroker, int]] = []
        try:
            for node in self.nodes:
                pid = node.running_pid()
                if pid is None:
                    launched.append((node, node.launch(deadline)))
            for node in self.nodes:
                pid = node.running_pid()
                if pid is None:
                    raise BrokerStartError(f"node {node.config.node_id} of {self.home} is not running")
                node.wait_ready(pid, deadline)
            self._wait_all_registered(deadline)
        except LocalBrokerError:
            for node, _ in launched:
                with contextlib.suppress(LocalBrokerError):
                    node.kill()
            raise
        return time.monotonic() - started

    def _wait_all_registered(self, deadline: float) -> None:
        """Until the cluster's metadata lists every node as a live broker: a node answers on its
        port a moment before the controller has registered it, and a client told the cluster is up
        would find one broker missing (replication factor 3 refused, a partition without leader)."""
        wanted = {node.config.node_id for node in self.nodes}
        seen: set[int] = set()
        while time.monotonic() < deadline:
            with contextlib.suppress(KafkaException):
                seen = self.brokers_seen()
            if seen >= wanted:
                return
            time.sleep(0.2)
        raise BrokerStartError(f"nodes {sorted(wanted - seen)} of {self.home} never registered as brokers")

    def start_node(self, node_id: int, timeout_s: float = 120.0) -> float:
        """Start one node (after a kill or stop) and wait until it answers."""
        return self.node(node_id).start(timeout_s=timeout_s)

    def stop_node(self, node_id: int, timeout_s: float = 30.0) -> None:
        """A clean shutdown of one node (SIGTERM; SIGKILL after `timeout_s`)."""
        self.node(node_id).stop(timeout_s=timeout_s)

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node: a crash."""
        self.node(node_id).kill()

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM every node at once (one by one, the last would wait for a quorum that is gone),
        then wait for each; SIGKILL any still alive after `timeout_s`."""
        for node in self.nodes:
            pid = node.running_pid()
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            pid = node.running_pid()
            if pid is not None:
                wait_pid_exit(pid, max(0.0, deadline - time.monotonic()))
            node.stop(timeout_s=max(0.1, deadline - time.monotonic()))

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
