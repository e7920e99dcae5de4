"""`inferq mirror`'s configuration: the flows, the topic filters MirrorMaker will apply, refusals."""

from __future__ import annotations

import argparse
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from inferq.cli import build_parser
from inferq.tools.bench.recorder import marked_content
from inferq.tools.mirror.cli import config_from_args, parse_regions
from inferq.tools.mirror.config import CENTRAL, IDENTITY_POLICY, MirrorConfig
from inferq.tools.mirror.mirror import LocalMirrorMaker
from inferq.tools.paths import find_project_root
from inferq.tools.servercli import EXIT_NOT_RUNNING, EXIT_OK, UsageError
from inferq.tools.simbackend.timings import CallTimings
from tests.support.waiting import wait_until

ROOT = find_project_root(Path(__file__))


def java_properties(text: str) -> dict[str, str]:
    """What java.util.Properties.load reads from `text` (the subset the generator writes: one
    `key=value` a line, `#` comments, backslash escapes)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, line
        values[key] = re.sub(r"\\(.)", r"\1", value)
    return values


def config(tmp_path: Path, **overrides: object) -> MirrorConfig:
    options: dict[str, object] = {
        "home": tmp_path,
        "central": "127.0.0.1:9092",
        "regions": {"eu": "127.0.0.1:9192"},
        "project_root": ROOT,
    }
    return MirrorConfig(**(options | overrides))  # type: ignore[arg-type]


def test_one_region_mirrors_its_requests_to_central_and_its_reply_topic_back(tmp_path: Path) -> None:
    props = java_properties(config(tmp_path).properties())
    assert props["clusters"] == "central,eu"
    assert props["central.bootstrap.servers"] == "127.0.0.1:9092"
    assert props["eu.bootstrap.servers"] == "127.0.0.1:9192"
    assert props["replication.policy.class"] == IDENTITY_POLICY
    assert props["eu->central.enabled"] == props["central->eu.enabled"] == "true"
    requests = re.compile(props["eu->central.topics"])
    replies = re.compile(props["central->eu.topics"])
    for tier in ("high", "medium", "low"):
        assert requests.fullmatch(f"inferq.requests.{tier}")
        assert not replies.fullmatch(f"inferq.requests.{tier}")
    assert replies.fullmatch("inferq.results.eu")
    # MirrorMaker matches whole names: nothing else of the pipeline crosses, in either direction.
    for other in (
        "inferq.results",
        "inferq.results.us",
        "inferq.retry",
        "inferq.dlq",
        "inferqXrequests.high",
    ):
        assert not requests.fullmatch(other) and not replies.fullmatch(other), other
    assert not requests.fullmatch("inferq.requests.high.x")
    assert props["groups.exclude"] == ".*"
    assert props["sync.topic.configs.enabled"] == "false"
    # Worker settings only reach a worker under its target cluster's alias.
    for alias in ("central", "eu"):
        assert props[f"{alias}.offset.flush.interval.ms"] == "2000"
        assert props[f"{alias}.scheduled.rebalance.max.delay.ms"] == "0"
    assert "offset.flush.interval.ms" not in props


def test_the_topic_prefix_is_taken_literally(tmp_path: Path) -> None:
    props = java_properties(config(tmp_path, topic_prefix="a.b").properties())
    requests = re.compile(props["eu->central.topics"])
    assert requests.fullmatch("a.b.requests.low")
    assert not requests.fullmatch("aXb.requests.low")


def test_two_regions_never_mirror_between_each_other(tmp_path: Path) -> None:
    cfg = config(tmp_path, regions={"us": "127.0.0.1:9292", "eu": "127.0.0.1:9192"})
    assert [f.name for f in cfg.flows()] == ["eu->central", "central->eu", "us->central", "central->us"]
    props = java_properties(cfg.properties())
    for pair in ("eu->us", "us->eu"):
        assert props[f"{pair}.enabled"] == "false"
        assert props[f"{pair}.emit.heartbeats.enabled"] == "false"
    assert re.compile(props["central->us.topics"]).fullmatch("inferq.results.us")
    assert not re.compile(props["central->us.topics"]).fullmatch("inferq.results.eu")
    assert [f.heartbeats_topic for f in cfg.flows()][:2] == ["eu.heartbeats", "central.heartbeats"]


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        ({"regions": {}}, "at least one region"),
        ({"regions": {CENTRAL: "127.0.0.1:9192"}}, "central"),
        ({"regions": {"results": "127.0.0.1:9192"}}, "word of the topic table"),
        ({"regions": {"EU": "127.0.0.1:9192"}}, "lowercase"),
        ({"regions": {"eu.x": "127.0.0.1:9192"}}, "lowercase"),
        ({"regions": {"e" * 33: "127.0.0.1:9192"}}, "1-32"),
        ({"regions": {"eu": "127.0.0.1:9192\nsync.topic.acls.enabled=true"}}, "host:port"),
        ({"regions": {"eu": ""}}, "host:port"),
        ({"central": "127.0.0.1"}, "host:port"),
        ({"regions": {"eu": "127.0.0.1:9092"}}, "its own bootstrap"),
        ({"flush_interval_ms": 0}, "flush_interval_ms"),
        ({"flush_interval_ms": 10**9}, "flush_interval_ms"),
        ({"topic_prefix": "x\ny=z"}, "topic prefix"),
        ({"topic_prefix": ""}, "topic prefix"),
        ({"topic_prefix": "a b"}, "topic prefix"),
        ({"heap": "lots"}, "heap"),
        ({"heap": "512m -Dx=y"}, "heap"),
    ],
)
def test_a_configuration_mirrormaker_would_misread_is_refused(
    tmp_path: Path, overrides: dict[str, object], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        config(tmp_path, **overrides)


def test_the_last_start_is_remembered_for_stop_and_status(tmp_path: Path) -> None:
    cfg = config(tmp_path, regions={"eu": "127.0.0.1:9192", "us": "127.0.0.1:9292"}, flush_interval_ms=500)
    cfg.settings_file.write_text(cfg.to_json(), encoding="utf-8")
    assert MirrorConfig.load(tmp_path, ROOT) == cfg
    assert MirrorConfig.load(tmp_path / "nothing", ROOT) is None


def test_cli_regions_are_name_equals_bootstrap(tmp_path: Path) -> None:
    assert parse_regions(["eu=127.0.0.1:9192", "us=h:1"]) == {"eu": "127.0.0.1:9192", "us": "h:1"}
    for bad in (["eu"], ["=h:1"], ["eu="], ["eu=h:1", "eu=h:2"]):
        with pytest.raises(UsageError):
            parse_regions(bad)


def test_cli_without_a_previous_start_needs_the_clusters(tmp_path: Path) -> None:
    args = argparse.Namespace(home=tmp_path, central=None, region=[], topic_prefix=None)
    with pytest.raises(UsageError, match="--central"):
        config_from_args(args)
    args = argparse.Namespace(home=tmp_path, central="127.0.0.1:9092", region=["central=h:1"])
    with pytest.raises(UsageError, match="central"):
        config_from_args(args)


def test_mirrormaker_runs_the_broker_s_kafka_version() -> None:
    def version(pom: Path) -> str:
        found = ET.parse(pom).getroot().find(".//{http://maven.apache.org/POM/4.0.0}kafka.version")  # noqa: S314
        assert found is not None and found.text
        return found.text

    assert version(ROOT / "infra/kafka/mirror/pom.xml") == version(ROOT / "infra/kafka/pom.xml")


def test_the_simulated_backend_counts_each_marked_call_it_served() -> None:
    timings = CallTimings()
    body = {"messages": [{"role": "user", "content": marked_content("r1")}]}
    first = timings.received(body)
    timings.done(first)
    assert timings.served == {"r1": 1}
    timings.received({"messages": [{"role": "user", "content": "unmarked"}]})
    timings.received(body)  # received again but never answered in full (a 429): not served
    assert timings.served == {"r1": 1}
    timings.done(timings.received(body))
    assert timings.served == {"r1": 2}
    timings.reset()
    assert timings.served == {}


def test_a_pid_file_naming_another_process_is_never_signalled(tmp_path: Path) -> None:
    mirror = LocalMirrorMaker(config(tmp_path))
    assert mirror.status().running is False
    mirror.stop()  # nothing recorded: nothing to do
    mirror.config.pid_file.write_text(f"{os.getpid()}\n", encoding="ascii")  # a reused pid: this test
    assert mirror.status().running is False
    mirror.stop(timeout_s=0.1)
    mirror.kill()
    assert not mirror.config.pid_file.exists()  # the stale record is dropped; we are still alive


def test_status_and_stop_of_a_home_never_started(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser("mirror")
    status = parser.parse_args(["mirror", "status", "--home", str(tmp_path)])
    assert status.func(status) == EXIT_NOT_RUNNING
    stop = parser.parse_args(["mirror", "stop", "--home", str(tmp_path)])
    assert stop.func(stop) == EXIT_OK
    assert "no start recorded" in capsys.readouterr().out


def test_a_pid_file_is_read_and_its_process_told_from_one_that_reused_the_pid(tmp_path):
    import subprocess

    from inferq.tools.processes import read_pid, runs_command

    pid_file = tmp_path / "x.pid"
    assert read_pid(pid_file) is None
    pid_file.write_text("not a pid")
    assert read_pid(pid_file) is None
    sleeper = subprocess.Popen(["sleep", "37"])
    try:
        # Popen returns after the fork, maybe before the exec: wait (bounded) for the command line.
        wait_until(
            lambda: b"sleep" in Path(f"/proc/{sleeper.pid}/cmdline").read_bytes(), "the exec of sleep", 10
        )
        pid_file.write_text(f"{sleeper.pid}\n")
        assert read_pid(pid_file) == sleeper.pid
        assert runs_command(sleeper.pid, b"sleep", b"37")
        assert not runs_command(sleeper.pid, b"sleep", b"kafka.Kafka")  # alive, another command
    finally:
        sleeper.kill()
        sleeper.wait(10)
    assert not runs_command(sleeper.pid, b"sleep", b"37")  # gone
