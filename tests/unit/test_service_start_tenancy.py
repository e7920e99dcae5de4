"""Each service's command checks tenancy before anything starts: open mode only on loopback, and a
tenants file that cannot be used stops it with the line named (exit 2, nothing connected)."""

from __future__ import annotations

import time

import pytest

from inferq.cli import main
from tests.support.tenants import TenantSpec


@pytest.mark.parametrize("service", ["ingest", "results"])
def test_a_service_in_open_mode_on_0_0_0_0_exits_2_with_the_reason(service, monkeypatch, capsys):
    monkeypatch.delenv("INFERQ_TENANTS_FILE", raising=False)
    started = time.monotonic()
    assert main([service, "--host", "0.0.0.0"]) == 2
    assert time.monotonic() - started < 10
    err = capsys.readouterr().err
    assert f"inferq {service}: not started: no tenants file" in err and "'0.0.0.0' is not one" in err


@pytest.mark.parametrize("service", ["ingest", "results"])
def test_a_service_with_a_bad_tenants_file_exits_2_naming_the_line(service, tmp_path, monkeypatch, capsys):
    path = tmp_path / "t.toml"
    path.write_text(TenantSpec("acme").toml().replace('max_tier = "HIGH"', 'max_tier = "TOP"'))
    monkeypatch.setenv("INFERQ_TENANTS_FILE", str(path))
    assert main([service, "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:7: [[tenants]] #1 'acme' (line 1): entitlements.max_tier" in err
