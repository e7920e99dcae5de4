"""The tenants in force: loaded at start, reloaded on change and on request, an invalid file (or one
removing too many tenants) keeping the previous tenants; authentication and labels over them; open
mode's bind rule; `inferq tenants`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path

import pytest

from inferq.cli import main
from inferq.tenancy.auth import ANONYMOUS
from inferq.tenancy.bind import is_loopback, require_tenants_or_loopback
from inferq.tenancy.errors import AuthenticationError, OpenModeRefusedError, TenantsFileError
from inferq.tenancy.keys import hash_key
from inferq.tenancy.metrics import watch_reloads
from inferq.tenancy.registry import TenantRegistry
from inferq.tenancy.settings import TenancySettings
from tests.support.fakes import InMemoryMetrics, labels
from tests.support.loop import in_loop
from tests.support.tenants import TenantSpec, tenants_toml, write_tenants
from tests.support.waiting import eventually


def registry_with(path: Path, *specs: TenantSpec, interval_s: float = 0.05) -> TenantRegistry:
    write_tenants(path, *specs)
    registry = TenantRegistry(path, reload_interval_s=interval_s)
    registry.load()
    return registry


def bearer(key: str) -> list[str]:
    return [f"Bearer {key}"]


def test_authentication_names_the_tenant_or_says_why_not(tmp_path):
    acme, other = TenantSpec("acme"), TenantSpec("other")
    registry = registry_with(tmp_path / "t.toml", acme, other)
    assert registry.authenticate(bearer(acme.key)).name == "acme"
    assert registry.authenticate(bearer(other.key)).authenticated
    for values, reason in ([], "missing"), (["Bearer a b"], "malformed"), (bearer("iq_nobody"), "unknown"):
        with pytest.raises(AuthenticationError) as refused:
            registry.authenticate(values)
        assert refused.value.reason == reason
    assert (registry.label("acme"), registry.label("removed")) == ("acme", "other")
    assert registry.weights() == {"acme": 1.0, "other": 1.0}


def test_open_mode_is_anonymous_with_one_label_and_no_weights():
    registry = TenantRegistry(None)
    assert registry.load() is None and registry.open_mode
    assert registry.authenticate([]) is ANONYMOUS
    assert registry.authenticate(["Bearer whatever"]) is ANONYMOUS
    assert (ANONYMOUS.label, registry.label("loadtest"), registry.weights()) == ("default", "default", None)


def test_a_bad_file_at_start_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text('[[tenants]]\nname = "a"\nweight = 0\n')
    with pytest.raises(TenantsFileError, match=r"t.toml:3: \[\[tenants\]\] #1 'a' \(line 1\): weight"):
        TenantRegistry(path).load()


def test_a_changed_file_is_reloaded_by_the_watcher_and_listeners_hear_of_it(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="inferq.tenancy")
    path = tmp_path / "t.toml"
    old, new = TenantSpec("acme"), TenantSpec("acme")

    async def scenario() -> None:
        registry = registry_with(path, old)
        seen: list[list[str]] = []
        registry.on_change(lambda d: seen.append(sorted(d.tenants)))
        await registry.start()
        try:
            # Rotation: the new key first, both valid for a while, then the old one removed.
            write_tenants(path, TenantSpec("acme", keys=[new.key, old.key]), TenantSpec("beta"))
            await eventually(lambda: registry.reloads >= 1, "reload 1", 5, interval_s=0.01)
            assert registry.authenticate(bearer(new.key)).name == "acme"
            assert registry.authenticate(bearer(old.key)).name == "acme"
            write_tenants(path, TenantSpec("acme", keys=[new.key]))
            await eventually(lambda: registry.reloads >= 2, "reload 2", 5, interval_s=0.01)
            with pytest.raises(AuthenticationError):
                registry.authenticate(bearer(old.key))
            assert seen == [["acme"], ["acme", "beta"], ["acme"]]
        finally:
            await registry.stop()

    asyncio.run(scenario())
    assert "tenants reloaded from" in caplog.text
    assert old.key not in caplog.text and hash_key(old.key)[7:] not in caplog.text


def test_an_invalid_or_deleted_file_keeps_the_previous_tenants_and_logs_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="inferq.tenancy")
    path = tmp_path / "t.toml"
    acme = TenantSpec("acme")

    async def scenario() -> None:
        registry = registry_with(path, acme)
        path.write_text(acme.toml().replace("weight = 1", "weight = -1"))
        assert await registry.reload() is False
        assert await registry.reload() is False  # the same bad content: no second error line
        assert registry.authenticate(bearer(acme.key)).name == "acme"
        path.unlink()
        assert await registry.reload() is False
        assert registry.authenticate(bearer(acme.key)).name == "acme"  # never open mode
        write_tenants(path, acme)
        assert await registry.reload() is True
        assert registry.failed_reloads == 2

    asyncio.run(scenario())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert "tenants file invalid, keeping the previous tenants" in errors[0] and "weight" in errors[0]
    assert "t.toml:4" in errors[0]
    assert "unreadable, keeping the previous tenants" in errors[1]
    assert hash_key(acme.key)[7:] not in caplog.text


FOUR = tuple(TenantSpec(name) for name in ("acme", "beta", "gamma", "delta"))


def registry_of_four(path: Path, **kwargs: float) -> TenantRegistry:
    write_tenants(path, *FOUR)
    registry = TenantRegistry(path, **kwargs)
    registry.load()
    return registry


def served(registry: TenantRegistry) -> list[str]:
    """The tenants whose key is accepted now."""
    names = []
    for spec in FOUR:
        with contextlib.suppress(AuthenticationError):
            names.append(registry.authenticate(bearer(spec.key)).name)
    return names


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.ERROR and "tenants file refused" in r.getMessage()
    ]


def assert_no_key_logged(caplog: pytest.LogCaptureFixture) -> None:
    for spec in FOUR:
        assert spec.key not in caplog.text and hash_key(spec.key)[7:] not in caplog.text


@in_loop
async def test_an_empty_file_on_reload_is_refused_and_every_key_still_works(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="inferq.tenancy")
    path = tmp_path / "t.toml"
    registry = registry_of_four(path)
    path.write_bytes(b"")
    assert await registry.reload() is False
    assert await registry.reload(force=True) is False  # SIGHUP does not push it through either
    assert served(registry) == ["acme", "beta", "gamma", "delta"]
    assert registry.refused_reloads == 2 and registry.reloads == 0
    [first, _] = refusals(caplog)
    assert "removes every tenant in force (4 of 4; 0 in the file)" in first
    assert_no_key_logged(caplog)


@in_loop
async def test_a_file_caught_mid_write_keeps_the_tenants_in_force(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="inferq.tenancy")
    path = tmp_path / "t.toml"
    registry = registry_of_four(path)
    whole = tenants_toml(*FOUR)
    second = whole.index("[[tenants]]", 1)
    # Cut inside an entry (not TOML), then at an entry's boundary (valid TOML, one tenant left).
    path.write_text(whole[: second + 20])
    assert await registry.reload() is False
    path.write_text(whole[:second])
    assert await registry.reload() is False
    assert served(registry) == ["acme", "beta", "gamma", "delta"]
    assert (registry.failed_reloads, registry.refused_reloads) == (1, 1)
    [refusal] = refusals(caplog)
    assert "removes 3 of the 4 tenants in force (75%), more than the 50% allowed" in refusal
    # The copy completes: the same tenants, taken as a normal reload.
    path.write_text(whole)
    assert await registry.reload() is True
    assert served(registry) == ["acme", "beta", "gamma", "delta"]
    assert_no_key_logged(caplog)


@in_loop
async def test_removing_three_of_four_is_refused_and_one_of_four_is_applied(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="inferq.tenancy")
    path = tmp_path / "t.toml"
    registry = registry_of_four(path)
    # Three new tenants do not make up for three removed ones.
    write_tenants(path, FOUR[0], TenantSpec("x"), TenantSpec("y"), TenantSpec("z"))
    assert await registry.reload() is False
    assert served(registry) == ["acme", "beta", "gamma", "delta"]
    assert len(refusals(caplog)) == 1
    write_tenants(path, *FOUR[:3])
    assert await registry.reload() is True
    assert served(registry) == ["acme", "beta", "gamma"]  # delta's key is refused from now on
    # Shares count against the tenants in force: 2 of the 3 left (67%) is more than half.
    write_tenants(path, FOUR[0])
    assert await registry.reload() is False
    assert served(registry) == ["acme", "beta", "gamma"]
    assert "removes 2 of the 3 tenants in force (67%)" in refusals(caplog)[-1]


@in_loop
async def test_at_a_share_of_one_any_removal_but_every_tenant_is_applied(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="inferq.tenancy")
    path = tmp_path / "t.toml"
    registry = TenantRegistry.loaded(
        TenancySettings(file=write_tenants(path, *FOUR), max_removed_share=1.0), topics=None
    )
    write_tenants(path, FOUR[0])
    assert await registry.reload() is True
    assert served(registry) == ["acme"]
    path.write_text("# nothing yet\n")
    assert await registry.reload() is False
    assert served(registry) == ["acme"]
    assert "removes every tenant in force (1 of 1; 0 in the file)" in refusals(caplog)[0]


@in_loop
async def test_a_share_of_zero_refuses_any_removal_but_takes_additions(tmp_path):
    path = tmp_path / "t.toml"
    registry = registry_of_four(path, max_removed_share=0.0)
    write_tenants(path, *FOUR[:3])
    assert await registry.reload() is False
    write_tenants(path, *FOUR, TenantSpec("epsilon"))
    assert await registry.reload() is True
    assert len(registry.directory or ()) == 5


@in_loop
async def test_an_empty_file_at_start_is_served_as_it_is_and_a_reload_fills_it(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="inferq.tenancy")
    path = tmp_path / "t.toml"
    path.write_text("")
    registry = TenantRegistry(path)
    assert registry.load() is not None and served(registry) == []
    assert "lists no tenant: every request is refused (401)" in caplog.text
    write_tenants(path, *FOUR)
    assert await registry.reload() is True
    assert served(registry) == ["acme", "beta", "gamma", "delta"]


@in_loop
async def test_the_reload_outcomes_are_a_metric(tmp_path):
    path = tmp_path / "t.toml"
    registry, reader = registry_of_four(path), InMemoryMetrics()
    watch_reloads(reader.meter, registry)
    path.write_text("")  # refused: every tenant removed
    await registry.reload()
    path.write_text("[[tenants]\n")  # invalid
    await registry.reload()
    write_tenants(path, *FOUR[1:])  # applied: 1 of 4 removed
    await registry.reload()
    assert reader.points("inferq_tenants_reloads_total") == {
        labels(outcome="applied"): 1,
        labels(outcome="invalid"): 1,
        labels(outcome="refused"): 1,
    }
    open_reader = InMemoryMetrics()
    watch_reloads(open_reader.meter, TenantRegistry(None))
    assert open_reader.points("inferq_tenants_reloads_total") == {}


@pytest.mark.parametrize("share", [-0.1, 1.01])
def test_the_share_is_within_zero_and_one(share, tmp_path):
    with pytest.raises(ValueError, match="max_removed_share"):
        TenantRegistry(tmp_path / "t.toml", max_removed_share=share)
    with pytest.raises(ValueError, match="max_removed_share"):
        TenancySettings(max_removed_share=share)


def test_the_share_defaults_to_half(monkeypatch):
    assert TenancySettings().max_removed_share == 0.5
    monkeypatch.setenv("INFERQ_TENANTS_MAX_REMOVED_SHARE", "0.25")
    assert TenancySettings().max_removed_share == 0.25


def test_sighup_reloads_at_once_even_unchanged(tmp_path):
    path = tmp_path / "t.toml"

    before = signal.getsignal(signal.SIGHUP)

    async def scenario() -> None:
        registry = registry_with(path, TenantSpec("acme"), interval_s=3_600)
        await registry.start(sighup=True)
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            await eventually(lambda: registry.reloads >= 1, "reload 1", 5, interval_s=0.01)
        finally:
            await registry.stop()

    asyncio.run(scenario())
    # The handler left with the watcher (not tested by sending one: the default would end pytest).
    assert signal.getsignal(signal.SIGHUP) == before


@in_loop
async def test_start_and_stop_are_idempotent_and_open_mode_watches_nothing(tmp_path):
    registry = registry_with(tmp_path / "t.toml", TenantSpec("a"))
    await registry.start()
    await registry.start()
    await registry.stop()
    await registry.stop()
    open_registry = TenantRegistry(None)
    await open_registry.start(sighup=True)
    await open_registry.stop()


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host):
    assert is_loopback(host)
    require_tenants_or_loopback(host, None)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.1", "192.168.1.5", "no-such-host.invalid"])
def test_open_mode_refuses_any_other_address_but_a_tenants_file_allows_it(host):
    with pytest.raises(OpenModeRefusedError, match="open mode serves anyone without a key"):
        require_tenants_or_loopback(host, None)
    require_tenants_or_loopback(host, Path("tenants.toml"))


def test_tenants_key_prints_a_key_once_and_its_hash_line(capsys):
    assert main(["tenants", "key"]) == 0
    out = capsys.readouterr().out
    [key] = [w for w in out.split() if w.startswith("iq_")]
    assert f'keys = ["{hash_key(key)}"]' in out
    assert out.count(key) == 1


def test_tenants_check_summarises_a_valid_file_without_hashes(tmp_path, capsys):
    spec = TenantSpec("acme", extra={"requests_per_minute": 60}, params={"max_tokens": 100})
    path = write_tenants(tmp_path / "t.toml", spec)
    assert main(["tenants", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "valid, 1 tenant(s)" in out and "acme: 1 key(s), weight 1 (100%)" in out
    assert "rate 60/min burst 60" in out and "params max_tokens<=100" in out
    assert hash_key(spec.key)[7:] not in out


def test_tenants_check_lists_every_problem_and_exits_1(tmp_path, capsys):
    path = tmp_path / "t.toml"
    path.write_text(TenantSpec("acme", weight=0).toml() + TenantSpec("b", extra={"burst": 2}).toml())
    assert main(["tenants", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert "2 problem(s)" in err
    assert f"{path}:4: [[tenants]] #1 'acme' (line 1): weight" in err
    assert f"{path}:13: [[tenants]] #2 'b' (line 9): burst: needs requests_per_minute" in err
