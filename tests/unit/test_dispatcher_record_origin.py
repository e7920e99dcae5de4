"""Whose a record is, at the dispatcher, on fakes: the signature decides (``record_origin.py``), and
the broker's append time bounds `created_at_ms` (``record_rules.py``).

A record naming tenant b that b's keys (or a service key) did not sign goes to the dead-letter topic
with the reason and is answered nothing: no result under b, no LLM call, b's share untouched; the
partition moves on. The hostile version on a real broker: tests/hostile/test_forged_records.py.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from inferq.cli import main
from inferq.dispatcher.consumer import LOG_APPEND_TIME, Partition
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.record_rules import RecordRules
from inferq.messaging import limits
from inferq.messaging.record_signing import SIGNATURE_HEADER
from inferq.messaging.records import Status
from inferq.messaging.topics import TopicNames
from inferq.tenancy.errors import TenantsFileError
from inferq.tenancy.registry import TenantRegistry
from inferq.tenancy.settings import TenancySettings
from inferq.tools.stack.tenants import SERVICE_RECORD_KEY
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.tenants import TenantSpec, tenants_toml, write_tenants
from tests.support.waiting import eventually

A, B = TenantSpec.with_record_key("a"), TenantSpec.with_record_key("b")
DAY_MS = 24 * 3_600_000


def tenants_rig(path: Path, *specs: TenantSpec, **overrides: object):  # type: ignore[no-untyped-def]
    write_tenants(path, *specs)
    return rig(tenants=TenancySettings(file=path, reload_interval_s=0.05), **overrides)


def reasons(r) -> dict[bytes, bytes]:  # type: ignore[no-untyped-def]
    """Each dead letter's request id header → its reason."""
    return {d.headers["inferq.request_id"]: d.headers["inferq.error"] for d in r.dead_letters()}


@in_loop
async def test_a_record_for_b_not_signed_by_b_is_dead_lettered_unanswered_and_b_still_runs(
    tmp_path: Path,
) -> None:
    forged = a_request("HIGH", tenant="b")
    unsigned = a_request("HIGH", tenant="b")
    garbage = a_request("HIGH", tenant="b")
    own = a_request("HIGH", tenant="b")
    by_ingest = a_request("HIGH", tenant="a")  # the service key signs for any tenant

    async with running(tenants_rig(tmp_path / "t.toml", A, B)) as r:
        high = r.partition("HIGH")
        r.consumer.produce(high, encoded(forged), signed_with=A.record_key)
        r.consumer.produce(high, encoded(unsigned), signed_with=None)
        r.consumer.produce(high, encoded(garbage), headers=((SIGNATURE_HEADER, b"v1,garbage"),))
        r.consumer.produce(high, encoded(own), signed_with=B.record_key)
        r.consumer.produce(high, encoded(by_ingest))
        await eventually(lambda: len(r.results()) == 2 and len(r.dead_letters()) == 3, "all handled")
        await eventually(lambda: r.consumer.committed_offset(high) == 5, "the commit past all five")
    assert set(r.results()) == {own.request_id, by_ingest.request_id}
    assert all(result.status is Status.OK for result in r.results().values())
    assert len(r.backend.models) == 2  # the refused ones never reached the LLM
    why = reasons(r)
    assert why[forged.request_id.encode()] == b"record signature does not verify for tenant 'b'"
    assert why[unsigned.request_id.encode()].startswith(b"record signature missing")
    assert why[garbage.request_id.encode()] == b"record signature does not verify for tenant 'b'"
    letter = next(d for d in r.dead_letters() if d.headers["inferq.request_id"] == forged.request_id.encode())
    assert letter.headers["inferq.tenant"] == b"b" and letter.value == encoded(forged)


@in_loop
async def test_a_tenant_key_signs_for_its_own_tenant_only_and_an_unknown_tenant_needs_a_service_key(
    tmp_path: Path,
) -> None:
    as_a = a_request("HIGH", tenant="a")
    stranger_by_a = a_request("HIGH", tenant="stranger")
    stranger_by_service = a_request("HIGH", tenant="stranger")

    async with running(tenants_rig(tmp_path / "t.toml", A, B)) as r:
        high = r.partition("HIGH")
        r.consumer.produce(high, encoded(as_a), signed_with=A.record_key)
        r.consumer.produce(high, encoded(stranger_by_a), signed_with=A.record_key)
        r.consumer.produce(high, encoded(stranger_by_service))
        await eventually(lambda: len(r.results()) == 2 and len(r.dead_letters()) == 2, "all handled")
    assert r.results()[as_a.request_id].status is Status.OK
    # Signed by ingest (the service key): the tenant check's refusal, FAILED as before.
    assert r.results()[stranger_by_service.request_id].status is Status.FAILED
    assert stranger_by_a.request_id not in r.results()
    assert reasons(r)[stranger_by_a.request_id.encode()] == (
        b"record signature does not verify for tenant 'stranger'"
    )


@in_loop
async def test_the_retry_topic_takes_only_records_the_service_key_signed(tmp_path: Path) -> None:
    by_tenant = a_request("HIGH", tenant="a").retry(not_before_ms=0)
    by_service = a_request("HIGH", tenant="a").retry(not_before_ms=0)

    async with running(tenants_rig(tmp_path / "t.toml", A)) as r:
        retries = Partition(r.topics.retry, 0)
        r.consumer.produce(retries, encoded(by_tenant), signed_with=A.record_key)
        r.consumer.produce(retries, encoded(by_service))
        await eventually(lambda: len(r.results()) == 1 and len(r.dead_letters()) == 1, "both handled")
    assert r.results()[by_service.request_id].status is Status.OK
    assert b"service record key" in reasons(r)[by_tenant.request_id.encode()]


@in_loop
async def test_the_dispatchers_own_retries_are_signed_and_read_back(tmp_path: Path) -> None:
    async with running(tenants_rig(tmp_path / "t.toml", A, max_attempts=2)) as r:
        r.backend.failure = _server_error()
        request = a_request("HIGH", tenant="a")
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: len(r.producer.on(r.topics.retry)) == 1, "the retry written")
        [retry] = r.producer.on(r.topics.retry)
        r.backend.failure = None
        r.consumer.produce(
            Partition(r.topics.retry, 0), retry.value, key=retry.key, headers=tuple(retry.headers.items())
        )
        await eventually(lambda: request.request_id in r.results(), "the retry answered")
    assert r.results()[request.request_id].status is Status.OK
    assert r.dead_letters() == []


def _server_error() -> BackendError:
    return BackendError("HTTP 500", retriable=True, status=500)


@in_loop
async def test_open_mode_checks_no_signature() -> None:
    unsigned = a_request("HIGH", tenant="anyone")
    async with running(rig()) as r:
        r.consumer.produce(r.partition("HIGH"), encoded(unsigned), signed_with=None)
        await eventually(lambda: unsigned.request_id in r.results(), "served")
    assert r.results()[unsigned.request_id].status is Status.OK


RULES = RecordRules(topics=TopicNames("unit"), max_attempts=3, max_backoff_ms=30_000)
HIGH_TOPIC = TopicNames("unit").all_requests[0]


def test_a_backdated_created_at_is_raised_to_the_append_time_less_the_allowed_lag():
    now = 1_800_000_000_000
    appended = now - 1_000
    backdated = a_request("HIGH", created_at_ms=now - 7 * DAY_MS + 60_000, expire_at_ms=now + 60_000)
    checked = RULES.check(backdated, source_topic=HIGH_TOPIC, now_ms=now, appended_ms=appended)
    assert checked.request.created_at_ms == appended - limits.MAX_APPEND_LAG_MS
    assert "created_at_ms" in checked.clamped
    # Without an append time (a CreateTime topic) only the dispatcher's 7-day bound holds.
    unbounded = RULES.check(backdated, source_topic=HIGH_TOPIC, now_ms=now)
    assert unbounded.request.created_at_ms == backdated.created_at_ms


def test_a_future_created_at_is_lowered_to_the_append_time_and_cannot_stretch_the_deadline():
    now = 1_800_000_000_000
    future = a_request("HIGH", created_at_ms=now + 50_000, expire_at_ms=now + 50_000 + limits.MAX_DEADLINE_MS)
    # Within the dispatcher's own skew allowance of its clock, but 10 minutes after the broker had it.
    appended = now - 600_000
    checked = RULES.check(future, source_topic=HIGH_TOPIC, now_ms=now, appended_ms=appended)
    assert checked.request.created_at_ms == appended
    assert checked.request.expire_at_ms == appended + limits.MAX_DEADLINE_MS


def test_a_created_at_within_the_allowed_lag_and_skew_is_kept():
    now = 1_800_000_000_000
    for created in (now - limits.MAX_APPEND_LAG_MS + 1, now, now + limits.MAX_CLOCK_SKEW_MS):
        request = a_request("HIGH", created_at_ms=created, expire_at_ms=now + 60_000)
        checked = RULES.check(request, source_topic=HIGH_TOPIC, now_ms=now, appended_ms=now)
        assert checked.request.created_at_ms == created


@in_loop
async def test_at_intake_the_bound_uses_log_append_time_only(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    week_ago = now - 7 * DAY_MS + 60_000
    by_broker = a_request("LOW", tenant="a", created_at_ms=week_ago, expire_at_ms=now + 600_000)
    by_producer = replace(by_broker, request_id="create-time-record")

    async with running(tenants_rig(tmp_path / "t.toml", A, schedule_pin="night")) as r:
        low = r.partition("LOW")
        r.consumer.produce(low, encoded(by_broker), timestamp=now, timestamp_type=LOG_APPEND_TIME)
        r.consumer.produce(low, encoded(by_producer), timestamp=now, timestamp_type=0)
        await eventually(lambda: len(r.results()) == 2, "both served")
    results = r.results()
    assert results[by_broker.request_id].enqueued_at_ms >= now - limits.MAX_APPEND_LAG_MS
    assert results[by_producer.request_id].enqueued_at_ms == week_ago


def test_ingest_and_the_dispatcher_refuse_a_tenants_file_without_a_service_key(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(tenants_toml(A, service_record_key=None))
    settings = TenancySettings(file=path)
    with pytest.raises(TenantsFileError, match=r"\[service\] record_keys is missing"):
        TenantRegistry.loaded(settings, TopicNames(), signs_records=True)
    assert TenantRegistry.loaded(settings, TopicNames()).directory is not None  # the results service


@in_loop
async def test_a_reload_dropping_the_service_key_is_refused(tmp_path: Path) -> None:
    path = write_tenants(tmp_path / "t.toml", A, B)
    registry = TenantRegistry.loaded(TenancySettings(file=path), TopicNames(), signs_records=True)
    path.write_text(tenants_toml(A, B, service_record_key=None))
    assert not await registry.reload()
    assert registry.refused_reloads == 1
    assert [k.get_secret_value() for k in registry.service_record_keys()] == [SERVICE_RECORD_KEY]


def test_request_topics_are_created_with_the_brokers_append_time_and_the_others_are_not():
    topics = TopicNames("unit")
    configs = {spec.name: spec.config() for spec in topics.specs()}
    for name in topics.all_requests:
        assert configs[name]["message.timestamp.type"] == "LogAppendTime"
    for name in (topics.retry, topics.results, topics.dlq):
        assert "message.timestamp.type" not in configs[name]


def test_tenants_check_says_a_file_without_a_service_key_stops_ingest_and_the_dispatcher(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.toml"
    path.write_text(tenants_toml(A, service_record_key=None))
    assert main(["tenants", "check", str(path)]) == 1
    assert "[service] record_keys is missing" in capsys.readouterr().err
