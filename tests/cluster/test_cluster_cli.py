"""`inferq broker` and `inferq topics create` on the three-node cluster, as a user types them."""

from __future__ import annotations

import argparse
import uuid

import pytest

from inferq.messaging.cli import register as register_topics
from inferq.messaging.topics import TopicNames
from inferq.tools.broker.cli import register as register_broker
from inferq.tools.broker.cluster import LocalCluster
from inferq.tools.servercli import EXIT_NOT_RUNNING

pytestmark = [pytest.mark.cluster, pytest.mark.kafka, pytest.mark.slow]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(prog="inferq")
    commands = parser.add_subparsers(dest="command", required=True)
    register_broker(commands)
    register_topics(commands)
    ns = parser.parse_args(list(argv))
    code: int = ns.func(ns)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_topics_create_says_what_it_chose_and_refuses_what_cannot_be(
    kafka_cluster: LocalCluster, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_cluster.bootstrap)
    monkeypatch.setenv("INFERQ_TOPIC_PREFIX", f"cli{uuid.uuid4().hex[:8]}")
    code, out = run(capsys, "topics", "create")
    assert code == 0, out
    assert "3 broker(s): replication factor 3, min.insync.replicas=2 (the default)" in out
    assert out.count("created") == len(TopicNames().specs()) == 7  # the chunk topic among them
    code, out = run(capsys, "topics", "create", "--replication-factor", "4")
    assert code == 2
    assert "needs at least 4 brokers" in out
    code, out = run(capsys, "topics", "create", "--min-insync-replicas", "5")
    assert code == 2
    assert "min.insync.replicas must be 1 to" in out


def test_status_stop_and_start_cover_every_node(
    kafka_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    home = str(kafka_cluster.home)
    code, out = run(capsys, "broker", "status", "--home", home)
    assert code == 0, out
    assert all(f"node {n}: {kafka_cluster.node(n).bootstrap}" in out for n in (1, 2, 3)), out
    code, out = run(capsys, "broker", "start", "--home", home, "--heap", "512m")
    assert (code, "already running" in out) == (0, True), out
    code, out = run(capsys, "broker", "start", "--home", home, "--nodes", "1")
    assert code == 2
    assert "3-node cluster" in out
    try:
        code, out = run(capsys, "broker", "stop", "--home", home)
        assert code == 0, out
        assert not any(node.is_running() for node in kafka_cluster.nodes), "a node outlived stop"
        code, out = run(capsys, "broker", "status", "--home", home)
        assert code == EXIT_NOT_RUNNING, out
        assert out.count("not running") >= 3, out
    finally:
        code, out = run(capsys, "broker", "start", "--home", home, "--heap", "512m")
    assert code == 0, out
    assert f"KAFKA_BOOTSTRAP_SERVERS={kafka_cluster.bootstrap}" in out
    assert kafka_cluster.brokers_seen() == {1, 2, 3}
