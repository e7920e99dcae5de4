"""The local Kafka broker tooling against the real broker: round trip, restart keeps data, CLI, jars."""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from inferq.tools.broker import (
    BrokerConfig,
    LocalBroker,
    ToolMissingError,
    ensure_jars,
    ephemeral,
    find_project_root,
    pick_free_ports,
    require_java,
    require_maven,
)
from inferq.tools.broker.cli import register
from inferq.tools.broker.ephemeral import broker_on_free_ports
from inferq.tools.broker.fixture import kafka_bootstrap_for_tests
from inferq.tools.broker.jars import STAMP_NAME
from inferq.tools.servercli import EXIT_NOT_RUNNING
from tests.support.waiting import wait_until

PROJECT_ROOT = find_project_root(Path(__file__).parent)


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with kafka_bootstrap_for_tests(tmp_path_factory.mktemp("kafka")) as servers:
        yield servers


def _create_topic(servers: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    futures[topic].result(timeout=30)


def _produce(servers: str, topic: str, key: bytes, value: bytes) -> None:
    delivered: list[Message] = []
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            failed.append(err)
        else:
            delivered.append(msg)

    producer = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True})
    producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
    assert producer.flush(30) == 0, "producer did not deliver within 30 s"
    assert not failed, failed
    assert len(delivered) == 1


def _consume_one(servers: str, topic: str, timeout_s: float = 60.0) -> tuple[bytes | None, bytes | None]:
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        msg = wait_until(lambda: consumer.poll(1.0), f"a record from {topic}", timeout_s, interval_s=0)
        if msg.error() is not None:
            raise AssertionError(f"consumer error: {msg.error()}")
        return msg.key(), msg.value()
    finally:
        consumer.close()


def _our_kafka_pids(home: Path) -> list[str]:
    """Java broker processes whose command line names this home's server.properties."""
    proc = subprocess.run(
        ["pgrep", "-f", f"kafka.Kafka {home / 'server.properties'}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    )
    return proc.stdout.split()


@pytest.mark.kafka
def test_produce_consume_round_trip(bootstrap: str) -> None:
    topic = f"localbroker-{uuid.uuid4().hex}"
    _create_topic(bootstrap, topic)
    _produce(bootstrap, topic, b"k1", b"hello kafka")
    assert _consume_one(bootstrap, topic) == (b"k1", b"hello kafka")


@pytest.mark.kafka
@pytest.mark.slow
def test_stop_and_restart_keeps_records(tmp_path: Path) -> None:
    port, controller_port = pick_free_ports(2)
    broker = LocalBroker(BrokerConfig(home=tmp_path / "broker", port=port, controller_port=controller_port))
    topic = f"restart-{uuid.uuid4().hex}"
    try:
        broker.start(timeout_s=180)
        meta = (broker.config.data_dir / "meta.properties").read_text(encoding="utf-8")
        _create_topic(broker.bootstrap, topic)
        _produce(broker.bootstrap, topic, b"before", b"survives a restart")

        broker.stop()
        assert not broker.is_running()
        assert not broker.config.pid_file.exists()
        assert _our_kafka_pids(broker.config.home) == []
        broker.stop()  # idempotent

        broker.start(timeout_s=180)
        # Not re-formatted: the same cluster and directory ids, so the old segments are served.
        assert (broker.config.data_dir / "meta.properties").read_text(encoding="utf-8") == meta
        assert _consume_one(broker.bootstrap, topic) == (b"before", b"survives a restart")
        status = broker.status()
        assert status.running
        assert status.bootstrap == f"127.0.0.1:{port}"
    finally:
        broker.stop()
    assert _our_kafka_pids(broker.config.home) == []
    assert "Kafka Server started" in broker.config.server_log.read_text(encoding="utf-8")


@pytest.mark.kafka
@pytest.mark.slow
def test_a_throwaway_broker_picks_new_ports_after_a_clash_and_deletes_its_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks: list[list[int]] = []

    def pick(count: int = 2) -> list[int]:
        # The first pick is a port another process holds by the time the broker binds it.
        ports = [taken.getsockname()[1], *pick_free_ports(count - 1)] if not picks else pick_free_ports(count)
        picks.append(ports)
        return ports

    monkeypatch.setattr(ephemeral, "pick_free_ports", pick)
    with taken, broker_on_free_ports(tmp_path) as broker:
        home = broker.config.home
        assert len(picks) == 2 and broker.config.port == picks[1][0]
        assert home.parent == tmp_path and broker.answers()
    assert not broker.is_running()
    assert not home.exists()
    assert _our_kafka_pids(home) == []


@pytest.mark.kafka
@pytest.mark.slow
def test_cli_start_status_stop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="inferq")
    register(parser.add_subparsers(dest="command", required=True))
    port, controller_port = pick_free_ports(2)
    home = tmp_path / "cli-broker"
    common = ["--home", str(home), "--port", str(port), "--controller-port", str(controller_port)]

    def run(*argv: str) -> int:
        ns = parser.parse_args(list(argv))
        code: int = ns.func(ns)
        return code

    try:
        assert run("broker", "status", *common) == EXIT_NOT_RUNNING
        assert run("broker", "start", *common) == 0
        assert "started on 127.0.0.1:" in capsys.readouterr().out
        assert run("broker", "start", *common) == 0  # idempotent
        assert "already running" in capsys.readouterr().out
        # Without --port, status and stop find the ports the broker was started with.
        assert run("broker", "status", "--home", str(home)) == 0
        assert f"127.0.0.1:{port}" in capsys.readouterr().out
    finally:
        assert run("broker", "stop", "--home", str(home)) == 0
    assert run("broker", "status", "--home", str(home)) == EXIT_NOT_RUNNING
    assert _our_kafka_pids(home) == []


@pytest.mark.slow
def test_ensure_jars_fetches_once_and_again_after_pom_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT_ROOT / "infra" / "kafka", project / "infra" / "kafka")
    jars = ensure_jars(project)
    assert jars == project / ".inferq" / "kafka" / "jars"
    assert any(p.name.startswith("kafka_2.13-") for p in jars.glob("*.jar"))
    assert any(jars.glob("log4j-slf4j-impl-2.25.*.jar"))
    stamp = (jars / STAMP_NAME).read_text(encoding="utf-8")

    # Complete and unchanged: no Maven needed at all.
    with monkeypatch.context() as patched:
        patched.setenv("PATH", str(tmp_path / "empty-bin"))
        assert ensure_jars(project) == jars

    pom = project / "infra" / "kafka" / "pom.xml"
    pom.write_text(pom.read_text(encoding="utf-8") + "<!-- edited -->\n", encoding="utf-8")
    ensure_jars(project)
    assert (jars / STAMP_NAME).read_text(encoding="utf-8") != stamp


def test_missing_tools_say_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ToolMissingError, match=r"apt-get install -y openjdk-17-jre-headless"):
        require_java()
    with pytest.raises(ToolMissingError, match=r"apt-get install -y maven"):
        require_maven()


def test_old_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.22\" 2024-01-16' >&2\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ToolMissingError, match=r"Java 17\+ required but .* is Java 11"):
        require_java()
