"""The ACLs of a pipeline: each service gets the least it needs, on its own prefix only."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from inferq.cli import main
from inferq.messaging.acls import Grant, Operation, Resource, ServicePrincipals, service_grants
from inferq.messaging.topics import TopicNames


def grants_of(principal: str) -> set[tuple[str, str, str, bool]]:
    who = ServicePrincipals(dispatcher_group="p-dispatcher", results_group="p-results")
    return {
        (g.operation.value, g.resource.value, g.name, g.prefixed)
        for g in service_grants(TopicNames("p"), who)
        if g.principal == f"User:{principal}"
    }


def test_ingest_writes_requests_and_reads_the_dispatchers_progress_and_the_reply_topics_only() -> None:
    assert grants_of("ingest") == {
        ("WRITE", "TOPIC", "p.requests.", True),
        ("DESCRIBE", "GROUP", "p-dispatcher", False),
        ("READ", "TOPIC", "p.results", False),
        ("READ", "TOPIC", "p.results.", True),
        # The streamed answers' chunks beside them.
        ("READ", "TOPIC", "p.chunks", False),
        ("READ", "TOPIC", "p.chunks.", True),
    }


def test_dispatchers_read_requests_and_retries_and_write_outcomes() -> None:
    assert grants_of("dispatcher") == {
        ("READ", "TOPIC", "p.requests.", True),
        ("READ", "TOPIC", "p.retry", False),
        ("WRITE", "TOPIC", "p.retry", False),
        ("WRITE", "TOPIC", "p.results", False),
        ("WRITE", "TOPIC", "p.results.", True),
        ("WRITE", "TOPIC", "p.chunks", False),
        ("WRITE", "TOPIC", "p.chunks.", True),
        ("WRITE", "TOPIC", "p.dlq", False),
        ("READ", "GROUP", "p-dispatcher", False),
    }


def test_the_results_service_reads_results_in_its_group_and_dead_letters_webhooks() -> None:
    assert grants_of("results") == {
        ("WRITE", "TOPIC", "p.dlq", False),  # webhooks not delivered
        ("READ", "TOPIC", "p.results", False),
        # Regional reply topics (the dot ends the prefix: never p.resultsfoo) and regional groups.
        ("READ", "TOPIC", "p.results.", True),
        # The chunk topics, read while an /events stream is open.
        ("READ", "TOPIC", "p.chunks", False),
        ("READ", "TOPIC", "p.chunks.", True),
        ("READ", "GROUP", "p-results", False),
        ("READ", "GROUP", "p-results-", True),
    }


def test_no_grant_reaches_another_pipeline() -> None:
    names = {
        g.name for g in service_grants(TopicNames("p"), ServicePrincipals()) if g.resource is Resource.TOPIC
    }
    # "p.requests." as a prefix does not match "pp.requests.high" or "p2.requests.high".
    assert all(name.startswith("p.") for name in names)


def test_a_grant_becomes_an_allow_binding_from_any_host() -> None:
    binding = Grant("User:ingest", Operation.WRITE, Resource.TOPIC, "p.requests.", prefixed=True).binding()
    assert binding.restype == ResourceType.TOPIC and binding.name == "p.requests."
    assert binding.resource_pattern_type == ResourcePatternType.PREFIXED
    assert (binding.principal, binding.host) == ("User:ingest", "*")
    assert binding.operation == AclOperation.WRITE and binding.permission_type == AclPermissionType.ALLOW
    literal = Grant("User:results", Operation.READ, Resource.GROUP, "g").binding()
    assert (
        literal.resource_pattern_type == ResourcePatternType.LITERAL and literal.restype == ResourceType.GROUP
    )


@pytest.mark.parametrize(("principal", "name"), [("ingest", "t"), ("User:", "t"), ("User:x", "")])
def test_a_malformed_grant_is_refused(principal: str, name: str) -> None:
    with pytest.raises(ValueError, match=r"principal|resource name"):
        Grant(principal, Operation.READ, Resource.TOPIC, name)


def test_acls_apply_dry_run_prints_the_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFERQ_TOPIC_PREFIX", "demo")
    monkeypatch.setenv("INFERQ_DISPATCHER_GROUP_ID", "demo-dispatcher")
    assert main(["acls", "apply", "--dry-run", "--results-group", "demo-results"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(service_grants(TopicNames("demo"), ServicePrincipals()))
    assert "User:ingest              WRITE    topic demo.requests.*" in lines
    assert any("READ     group demo-dispatcher" in line for line in lines)
    assert any("READ     group demo-results" in line for line in lines)
