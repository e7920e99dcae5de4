"""The dispatcher's side of tenants, on fakes: who may run (unknown tenant → dead letter), what
(entitlements), a flood's bounded share of the read-ahead, the concurrency cap, the removal rule."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import pytest

from inferq.dispatcher import offsets as offsets_module
from inferq.dispatcher.errors import RefusedRequestError
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.dispatcher.record_rules import Checked
from inferq.dispatcher.tenant_check import TenantCheck
from inferq.messaging.records import Status
from inferq.messaging.tiers import Tier
from inferq.messaging.topics import TopicNames
from inferq.tenancy.registry import TenantRegistry
from inferq.tenancy.settings import TenancySettings
from tests.support.clock import ManualClock
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.fakes import InMemoryMetrics, a_result, labels
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import eventually


def tenants_rig(path: Path, *specs: TenantSpec, **overrides: object):  # type: ignore[no-untyped-def]
    write_tenants(path, *specs)
    return rig(tenants=TenancySettings(file=path, reload_interval_s=0.05), **overrides)


def two_tenants_one_token(path: Path, **overrides: object):  # type: ignore[no-untyped-def]
    """Tenants a and b sharing one token at night, ten records of read-ahead per tier."""
    return tenants_rig(
        path,
        TenantSpec("a"),
        TenantSpec("b"),
        budget=1,
        readahead_per_tier=10,
        schedule_pin="night",
        **overrides,
    )


@in_loop
async def test_an_unknown_tenant_is_dead_lettered_with_the_reason_and_a_listed_one_runs(
    tmp_path: Path,
) -> None:
    stranger, member = a_request("HIGH", tenant="stranger"), a_request("HIGH", tenant="a")

    async with running(tenants_rig(tmp_path / "t.toml", TenantSpec("a"))) as r:
        high = r.partition("HIGH")
        r.consumer.produce(high, encoded(stranger))
        r.consumer.produce(high, encoded(member))
        await eventually(lambda: len(r.results()) == 2, "both answered")
        results = r.results()
        assert results[member.request_id].status is Status.OK
        refused = results[stranger.request_id]
        assert refused.status is Status.FAILED and "not in the tenants file" in (refused.error or "")
        [letter] = r.dead_letters()
        assert letter.headers["inferq.source.offset"] == b"0"
        assert b"tenant 'stranger' is not in the tenants file" in letter.headers["inferq.error"]
        assert len(r.backend.models) == 1  # the stranger never reached the LLM
        await eventually(lambda: r.consumer.committed_offset(high) == 2, "the commit past both")


@in_loop
async def test_entitlements_refuse_or_narrow_a_kafka_native_record(tmp_path: Path) -> None:
    spec = TenantSpec("batch", max_tier="LOW", entitlements={"models": []}, params={"max_tokens": 64})
    wants_model = a_request("HIGH", tenant="batch", model="inferq-accurate")
    too_many_tokens = a_request("HIGH", tenant="batch", params={"max_tokens": "500"})
    plain = a_request("HIGH", tenant="batch")

    async with running(tenants_rig(tmp_path / "t.toml", spec, schedule_pin="night")) as r:
        high = r.partition("HIGH")
        for request in (wants_model, too_many_tokens, plain):
            r.consumer.produce(high, encoded(request))
        await eventually(lambda: len(r.results()) == 3, "all answered")
        results = r.results()
        assert results[wants_model.request_id].status is Status.FAILED
        assert "model: not entitled" in (results[wants_model.request_id].error or "")
        assert results[too_many_tokens.request_id].status is Status.FAILED
        assert "params.max_tokens: over this tenant's cap, 64" in (
            results[too_many_tokens.request_id].error or ""
        )
        reasons = sorted(letter.headers["inferq.error"] for letter in r.dead_letters())
        assert len(reasons) == 2 and all(b"tenant 'batch' is not entitled" in x for x in reasons)
        # The one that may run runs at the tenant's highest tier, with its max_tokens cap.
        ran = results[plain.request_id]
        assert ran.status is Status.OK and ran.tier is Tier.LOW
        [(_, params)] = r.backend.calls
        assert params == {"max_tokens": 64}


@in_loop
async def test_a_flood_does_not_fill_the_read_ahead_and_a_small_tenant_runs_early(tmp_path: Path) -> None:
    """A writes 200 LOW requests, then B 5, all in one partition; one call at a time. B's five
    start among the first requests, not after A's 200; nothing is lost, called twice or committed
    early."""
    flood = [a_request("LOW", tenant="a", deadline_ms=600_000) for _ in range(200)]
    few = [a_request("LOW", tenant="b", deadline_ms=600_000) for _ in range(5)]

    async with running(two_tenants_one_token(tmp_path / "t.toml")) as r:
        r.backend.hold()
        low = r.partition("LOW")
        for request in [*flood, *few]:
            r.consumer.produce(low, encoded(request))
        # B's records are found behind A's: A holds only its share, the rest is deferred.
        await eventually(lambda: r.dispatcher.health()["held_by_tier"]["LOW"] >= 6, "both held")
        r.backend.release()
        await eventually(lambda: len(r.results()) == 205, "every request answered", timeout_s=20)
        assert len(r.producer.on(r.topics.results)) == 205  # one result each, none twice
        done_order = list(r.results())
        b_ids = {q.request_id for q in few}
        b_positions = [i for i, request_id in enumerate(done_order) if request_id in b_ids]
        # Without fair share B would finish at 200..204; with equal weights it takes one start
        # in two once found (the call held while intake read ahead is A's).
        assert max(b_positions) < 15, b_positions
        assert len(r.backend.models) == 205
        assert {res.status for res in r.results().values()} == {Status.OK}
        await eventually(lambda: r.consumer.committed_offset(low) == 205, "the commit to the end")


@in_loop
async def test_a_tenant_at_its_concurrency_cap_is_skipped_for_another(tmp_path: Path) -> None:
    capped = TenantSpec("a", extra={"max_concurrency": 1})

    async with running(tenants_rig(tmp_path / "t.toml", capped, TenantSpec("b"), budget=4)) as r:
        r.backend.hold()
        high = r.partition("HIGH")
        for tenant in ("a", "a", "a", "b", "b"):
            r.consumer.produce(high, encoded(a_request("HIGH", tenant=tenant)))
        await eventually(lambda: r.backend.in_flight == 3, "one of A's and both of B's running")
        await asyncio.sleep(0.05)  # several starter rounds: A's other two still wait
        assert r.backend.in_flight == 3
        r.backend.release()
        await eventually(lambda: len(r.results()) == 5, "all answered")


def checked(tenant: str, created_at_ms: int) -> Checked:
    request = a_request(
        "MEDIUM", tenant=tenant, created_at_ms=created_at_ms, expire_at_ms=created_at_ms + 60_000
    )
    return Checked(request, Tier.MEDIUM, {}, None, ())


def test_a_removed_tenant_keeps_the_requests_it_made_before_the_reload(tmp_path: Path) -> None:
    path = write_tenants(tmp_path / "t.toml", TenantSpec("a"), TenantSpec("gone"))
    clock = ManualClock(1_000_000)
    registry = TenantRegistry(path, topics=TopicNames())
    registry.load()
    tenant_check = TenantCheck(registry, default_reply_topic="inferq.results", clock_ms=clock)
    assert tenant_check.check(checked("gone", 999_000)).request.tenant == "gone"

    write_tenants(path, TenantSpec("a"))
    clock.now_ms = 2_000_000
    assert asyncio.run(registry.reload())
    # Made before the reload: still runs. Made after: refused as unknown, like any stranger.
    assert tenant_check.check(checked("gone", 1_999_999)).request.tenant == "gone"
    with pytest.raises(RefusedRequestError, match="not in the tenants file") as refused:
        tenant_check.check(checked("gone", 2_000_000))
    assert refused.value.cause == "unknown_tenant"
    assert tenant_check.label("gone") == "gone" and tenant_check.label("stranger") == "other"

    write_tenants(path, TenantSpec("a"), TenantSpec("gone"))  # back: everything runs again
    clock.now_ms = 3_000_000
    assert asyncio.run(registry.reload())
    assert tenant_check.check(checked("gone", 2_500_000)).request.tenant == "gone"
    write_tenants(path, TenantSpec("a"))  # removed again: the new removal time counts
    clock.now_ms = 4_000_000
    assert asyncio.run(registry.reload())
    with pytest.raises(RefusedRequestError):
        tenant_check.check(checked("gone", 4_000_001))


def test_open_mode_accepts_every_tenant_with_the_global_rules() -> None:
    registry = TenantRegistry(None)
    registry.load()
    tenant_check = TenantCheck(
        registry, default_reply_topic="inferq.results", clock_ms=lambda: int(time.time() * 1000)
    )
    original = checked("anyone", int(time.time() * 1000))
    assert tenant_check.check(original) is original
    assert tenant_check.label("anyone") == "default"


@in_loop
async def test_deferred_records_are_read_again_when_their_partitions_window_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window of uncommitted offsets pauses a partition; when it is full of deferred records,
    the rewind must still read them (else nothing completes and the window never moves)."""
    monkeypatch.setattr(offsets_module, "MAX_UNCOMMITTED", 30)
    flood = [a_request("LOW", tenant="a", deadline_ms=600_000) for _ in range(100)]

    async with running(two_tenants_one_token(tmp_path / "t.toml")) as r:
        low = r.partition("LOW")
        for request in flood:
            r.consumer.produce(low, encoded(request))
        await eventually(lambda: len(r.results()) == 100, "every request answered", timeout_s=20)
        assert len(r.backend.models) == 100
        await eventually(lambda: r.consumer.committed_offset(low) == 100, "the commit to the end")


def test_dispatcher_metrics_label_tenants_from_the_file_only(tmp_path: Path) -> None:
    path = write_tenants(tmp_path / "t.toml", TenantSpec("a"), TenantSpec("b"))
    registry = TenantRegistry(path, topics=TopicNames())
    registry.load()
    tenant_check = TenantCheck(registry, default_reply_topic="inferq.results", clock_ms=lambda: 0)
    reader = InMemoryMetrics()
    metrics = DispatcherMetrics(
        tokens_in_use=dict,
        tokens_held=dict,
        effective_budget=lambda: 10,
        tenant_label=tenant_check.label,
        otel_meter=reader.meter,
    )
    metrics.record_refused("a", "not_entitled")
    for stranger in ("x1", "x2", "x3"):  # whatever a producer writes, one label
        metrics.record_refused(stranger, "unknown_tenant")
    metrics.record_outcome(Tier.LOW, replace(a_result("r1"), tenant="b"))
    metrics.record_outcome(Tier.LOW, replace(a_result("r2"), tenant="gone-or-never-there"))
    metrics.watch_tenants(lambda: {"a": 2, "x1": 1, "x2": 1}, lambda: {"b": 4}, lambda: 7)
    assert reader.points("inferq_refused_total") == {
        labels(tenant="a", cause="not_entitled"): 1,
        labels(tenant="other", cause="unknown_tenant"): 3,
    }
    assert reader.points("inferq_outcomes_total") == {
        labels(tier="LOW", status="OK", tenant="b"): 1,
        labels(tier="LOW", status="OK", tenant="other"): 1,
    }
    assert reader.points("inferq_tenant_tokens_in_use") == {labels(tenant="a"): 2, labels(tenant="other"): 2}
    assert reader.points("inferq_tenant_readahead_waiting") == {labels(tenant="b"): 4}
    assert reader.points("inferq_readahead_deferred") == {labels(): 7}


@in_loop
async def test_deferred_records_survive_a_rebalance_and_the_commit_never_passes_them(tmp_path: Path) -> None:
    """While A's records are deferred, the partition is revoked and handed back (an eager
    rebalance): the commit made inside the rebalance stops at the first deferred record, the new
    assignment reads them again, and every request is called once."""
    flood = [a_request("LOW", tenant="a", deadline_ms=600_000) for _ in range(40)]
    few = [a_request("LOW", tenant="b", deadline_ms=600_000) for _ in range(3)]

    async with running(two_tenants_one_token(tmp_path / "t.toml")) as r:
        r.backend.hold()
        low = r.partition("LOW")
        for request in [*flood, *few]:
            r.consumer.produce(low, encoded(request))
        await eventually(lambda: r.dispatcher.health()["deferred"] > 0, "deferred records")
        await eventually(lambda: r.dispatcher.health()["held_by_tier"]["LOW"] >= 5, "B's held too")
        await r.consumer.rebalance(set(r.consumer.logs))
        committed = r.consumer.committed_offset(low)
        assert committed is not None and committed <= 1  # at most the call running, not beyond
        r.backend.release()
        await eventually(lambda: len(r.results()) == 43, "every request answered", timeout_s=20)
        assert len(r.backend.models) == 43  # none called twice
        await eventually(lambda: r.consumer.committed_offset(low) == 43, "the commit to the end")


@in_loop
async def test_deferred_records_that_run_out_of_time_are_answered_expired(tmp_path: Path) -> None:
    doomed = [a_request("LOW", tenant="a", deadline_ms=400) for _ in range(30)]

    async with running(two_tenants_one_token(tmp_path / "t.toml", early_drop=False)) as r:
        r.backend.hold()
        low = r.partition("LOW")
        for request in doomed:
            r.consumer.produce(low, encoded(request))
        # The running one too: its deadline cuts the wait for the held call.
        await eventually(lambda: len(r.results()) == 30, "every one answered")
        assert {res.status for res in r.results().values()} == {Status.EXPIRED}
        assert r.dispatcher.health()["deferred"] == 0
        r.backend.release()
        await eventually(lambda: r.consumer.committed_offset(low) == 30, "the commit to the end")


@pytest.mark.parametrize("name", ["x" * 64, "other", "default", "a\nb", "ü" * 10, ""])
def test_a_hostile_tenant_name_is_refused_without_being_echoed_whole(tmp_path: Path, name: str) -> None:
    path = write_tenants(tmp_path / "t.toml", TenantSpec("a"), TenantSpec("b"))
    registry = TenantRegistry(path, topics=TopicNames())
    registry.load()
    tenant_check = TenantCheck(registry, default_reply_topic="inferq.results", clock_ms=lambda: 0)
    with pytest.raises(RefusedRequestError) as refused:
        tenant_check.check(checked(name, 1_000))
    reason = refused.value.reason
    assert refused.value.cause == "unknown_tenant" and "not in the tenants file" in reason
    assert len(reason) <= 120 and "\n" not in reason
    assert tenant_check.label(name) == "other"
