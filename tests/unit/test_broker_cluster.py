"""The local cluster's layout and node configuration, without starting a JVM."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from inferq.tools.broker.broker import BrokerConfig, recorded_ports, server_properties
from inferq.tools.broker.cli import _cluster_from_args
from inferq.tools.broker.cluster import ClusterHomeError, ClusterLayout, LocalCluster
from inferq.tools.broker.errors import LocalBrokerError
from inferq.tools.servercli import UsageError


def props(text: str) -> dict[str, str]:
    pairs = (line.partition("=") for line in text.splitlines() if line and not line.startswith("#"))
    return {k: v for k, _, v in pairs}


def layout() -> ClusterLayout:
    return ClusterLayout("AAAAAAAAAAAAAAAAAAAAAA", (7101, 7102, 7103), (7201, 7202, 7203))


def test_a_single_node_is_configured_as_before(tmp_path: Path) -> None:
    p = props(server_properties(BrokerConfig(home=tmp_path, port=7001, controller_port=7002)))
    assert p["node.id"] == "1"
    assert p["controller.quorum.voters"] == "1@127.0.0.1:7002"
    assert p["offsets.topic.replication.factor"] == "1"
    assert p["transaction.state.log.min.isr"] == "1"
    assert p["share.coordinator.state.topic.replication.factor"] == "1"
    # The dispatcher's 2 s session timeout must be allowed (Kafka's floor is 6 s).
    assert p["group.min.session.timeout.ms"] == "1000"


def test_every_node_of_a_cluster_votes_and_replicates_the_internal_topics(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, layout(), project_root=tmp_path)
    texts = [props(server_properties(node.config)) for node in cluster.nodes]
    assert [p["node.id"] for p in texts] == ["1", "2", "3"]
    voters = "1@127.0.0.1:7201,2@127.0.0.1:7202,3@127.0.0.1:7203"
    assert {p["controller.quorum.voters"] for p in texts} == {voters}
    assert [p["advertised.listeners"] for p in texts] == [
        f"PLAINTEXT://127.0.0.1:{port}" for port in (7101, 7102, 7103)
    ]
    assert {p["offsets.topic.replication.factor"] for p in texts} == {"3"}
    assert {p["transaction.state.log.min.isr"] for p in texts} == {"2"}
    assert len({p["log.dirs"] for p in texts}) == 3
    assert cluster.bootstrap == "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
    assert {node.config.cluster_id for node in cluster.nodes} == {layout().cluster_id}


def test_a_node_home_records_its_own_ports(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, layout(), project_root=tmp_path)
    node = cluster.node(2).config
    node.home.mkdir(parents=True)
    node.properties_file.write_text(server_properties(node))
    assert recorded_ports(node.home) == (7102, 7202)


def test_a_layout_is_remembered_in_its_home(tmp_path: Path) -> None:
    first = LocalCluster.open(tmp_path / "c", nodes=3, project_root=tmp_path)
    again = LocalCluster.open(tmp_path / "c", project_root=tmp_path)
    assert again.layout == first.layout
    assert len(set(first.layout.client_ports + first.layout.controller_ports)) == 6
    chosen = LocalCluster.open(tmp_path / "d", nodes=3, first_port=19092, project_root=tmp_path)
    assert chosen.layout.client_ports == (19092, 19093, 19094)
    assert json.loads((tmp_path / "d" / "cluster.json").read_text())["client_ports"] == [19092, 19093, 19094]


@pytest.mark.parametrize(
    ("clients", "controllers"),
    [((7101,), (7201,)), ((7101, 7101), (7201, 7202)), ((7101, 7102), (7201,)), ((0, 7102), (7201, 7202))],
)
def test_a_bad_layout_is_refused(clients: tuple[int, ...], controllers: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="cluster"):
        ClusterLayout("AAAAAAAAAAAAAAAAAAAAAA", clients, controllers)


def test_a_home_holding_something_else_is_refused(tmp_path: Path) -> None:
    single = tmp_path / "single"
    single.mkdir()
    (single / "server.properties").write_text("node.id=1\n")
    with pytest.raises(ClusterHomeError, match="single-node"):
        LocalCluster.open(single, nodes=3, project_root=tmp_path)
    LocalCluster.open(tmp_path / "three", nodes=3, project_root=tmp_path)
    with pytest.raises(ClusterHomeError, match="3-node cluster, not 5"):
        LocalCluster.open(tmp_path / "three", nodes=5, project_root=tmp_path)
    with pytest.raises(ClusterHomeError, match="no cluster"):
        LocalCluster.open(tmp_path / "empty", project_root=tmp_path)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "cluster.json").write_text("{not json")
    with pytest.raises(ClusterHomeError, match="unreadable"):
        LocalCluster.open(tmp_path / "broken", project_root=tmp_path)


def test_the_active_controller_is_the_leader_of_the_newest_epoch(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, layout(), project_root=tmp_path)
    with pytest.raises(LocalBrokerError, match="quorum leader"):
        cluster.active_controller()
    for node_id, (leader, epoch) in {1: (2, 4), 2: (3, 5), 3: (-1, 6)}.items():
        folder = cluster.node(node_id).config.data_dir / "__cluster_metadata-0"
        folder.mkdir(parents=True)
        (folder / "quorum-state").write_text(json.dumps({"leaderId": leader, "leaderEpoch": epoch}))
    assert cluster.active_controller() == 3


def args(home: Path, **over: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "home": home,
        "port": None,
        "controller_port": None,
        "ssl_port": None,
        "nodes": None,
        "security": None,
        "heap": "512m",
    }
    return argparse.Namespace(**(base | over))


def test_the_cli_keeps_one_node_a_single_broker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERQ_BROKER_PORT", raising=False)
    assert _cluster_from_args(args(tmp_path / "a")) is None
    assert _cluster_from_args(args(tmp_path / "a", nodes=1)) is None
    assert not (tmp_path / "a").exists(), "asking about one node wrote nothing"
    cluster = _cluster_from_args(args(tmp_path / "b", nodes=3))
    assert cluster is not None
    assert cluster.layout.nodes == 3
    # stop and status (no --nodes) find the cluster the home remembers.
    again = _cluster_from_args(args(tmp_path / "b"))
    assert again is not None
    assert again.bootstrap == cluster.bootstrap


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"nodes": 0}, "--nodes must be"),
        ({"nodes": 10}, "--nodes must be"),
        ({"nodes": 3, "security": "sasl_ssl"}, "plaintext only"),
        ({"nodes": 3, "controller_port": 7000}, "controller ports"),
        ({"nodes": 3, "port": 65535}, "out of range"),
    ],
)
def test_the_cli_refuses_what_a_cluster_cannot_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, over: dict[str, object], message: str
) -> None:
    monkeypatch.delenv("INFERQ_BROKER_PORT", raising=False)
    with pytest.raises(UsageError, match=message):
        _cluster_from_args(args(tmp_path, **over))


def test_one_node_is_refused_in_a_cluster_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERQ_BROKER_PORT", raising=False)
    _cluster_from_args(args(tmp_path, nodes=3))
    with pytest.raises(UsageError, match="3-node cluster"):
        _cluster_from_args(args(tmp_path, nodes=1))
