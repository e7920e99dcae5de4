"""A tenants file caught mid-write, against a real ingest process on the real broker (issue 23, item 4).

Before: an empty file, or one cut at a ``[[tenants]]`` boundary, is a valid file with fewer tenants;
the next reload took it and every key of the tenants after the cut got 401 until the copy finished
and was reloaded. Now such a reload is refused (logged, counted on ``/metrics``), a cut inside an
entry is invalid and kept out as before, and every key keeps working; a legitimate removal of one
tenant in four still applies. The file is written in place (truncate, then write), as ``cp`` or an
editor saving in place does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.messaging.kafka_config import KafkaSettings
from inferq.tenancy.keys import hash_key
from inferq.tools.stack.process import ServiceProcess
from tests.hostile.conftest import HostileFigures
from tests.support.inprocess import free_port
from tests.support.tenants import TenantSpec, tenants_toml, write_tenants
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

FOUR = tuple(TenantSpec(name) for name in ("acme", "beta", "gamma", "delta"))
APPLIED = "tenants reloaded from"
CHAT: dict[str, Any] = {"scenario": "realtime_chat", "messages": [{"role": "user", "content": "hi"}]}


class Ingest:
    def __init__(self, process: ServiceProcess, url: str, metrics_url: str, figures: HostileFigures) -> None:
        self.process = process
        self.url = url
        self.metrics_url = metrics_url
        self.figures = figures

    def status(self, spec: TenantSpec) -> int:
        response = httpx.post(f"{self.url}/v1/requests", json=CHAT, headers=spec.headers(), timeout=10)
        self.figures.tried("tenants reload: a key after a rewrite")
        if response.status_code >= 500:
            self.figures.server_errors += 1
        return response.status_code

    def served(self) -> list[str]:
        """The tenants whose key ingest accepts now (202)."""
        return [spec.name for spec in FOUR if self.status(spec) == 202]

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")

    def rewrite(self, path: Path, text: str, expected: str) -> str:
        """Write `text` in place (truncate, then write); what the log says since, once a reload
        (every 0.2 s) has logged `expected` or taken a file (then the keys tell the story)."""
        since = len(self.log())
        path.write_text(text)
        return wait_until(
            lambda: self.log()[since:],
            f"a reload logging {expected!r}",
            20,
            interval_s=0.1,
            done=lambda new: expected in new or APPLIED in new,
        )


@pytest.fixture
def ingest(
    kafka_settings: KafkaSettings, tmp_path: Path, hostile_figures: HostileFigures
) -> Iterator[Ingest]:
    path = write_tenants(tmp_path / "tenants.toml", *FOUR)
    port, metrics_port = free_port(), free_port()
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "INFERQ_TOPIC_PREFIX": kafka_settings.topic_prefix,
        "INFERQ_TENANTS_FILE": str(path),
        "INFERQ_TENANTS_RELOAD_INTERVAL_S": "0.2",
    }
    process = ServiceProcess(
        "ingest",
        ["ingest", "--port", str(port), "--metrics-port", str(metrics_port)],
        tmp_path / "ingest.log",
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        process.start()
        process.wait_http_ready(f"{url}/healthz", 60)
        yield Ingest(process, url, f"http://127.0.0.1:{metrics_port}", hostile_figures)
    finally:
        assert process.stop() == 0


def test_a_truncated_tenants_file_keeps_every_key_working(ingest: Ingest) -> None:
    path = Path(ingest.process.env["INFERQ_TENANTS_FILE"])
    assert ingest.served() == ["acme", "beta", "gamma", "delta"]
    whole = tenants_toml(*FOUR)
    second = whole.index("[[tenants]]", 1)

    cuts = [
        # Caught right after the truncate; then after the first entry (valid, one tenant left).
        ("", "removes every tenant in force (4 of 4; 0 in the file)"),
        (whole[:second], "removes 3 of the 4 tenants in force (75%), more than the 50% allowed"),
        # Caught inside the second entry: not TOML, kept out as before.
        (whole[: second + 20], "tenants file invalid"),
        # The copy finished: the whole file is taken.
        (whole, APPLIED),
    ]
    for text, expected in cuts:
        logged = ingest.rewrite(path, text, expected)
        assert ingest.served() == ["acme", "beta", "gamma", "delta"], expected
        assert expected in logged

    log = ingest.log()
    assert "tenants file refused, keeping the previous tenants" in log
    assert httpx.get(f"{ingest.url}/metrics", timeout=10).status_code == 404  # its own port only
    metrics = httpx.get(f"{ingest.metrics_url}/metrics", timeout=10).text
    [refused] = [
        line
        for line in metrics.splitlines()
        if line.startswith("inferq_tenants_reloads_total{") and 'outcome="refused"' in line
    ]
    # At least the two refusals above; the reload may also catch a rewrite between truncate and write.
    assert float(refused.rsplit(" ", 1)[1]) >= 2
    for spec in FOUR:
        assert spec.key not in log and hash_key(spec.key)[7:] not in log


def test_removing_one_tenant_of_four_still_applies(ingest: Ingest) -> None:
    path = Path(ingest.process.env["INFERQ_TENANTS_FILE"])
    write_tenants(path, *FOUR[:3])  # written atomically, as docs/tenants.md shows
    wait_until(lambda: ingest.status(FOUR[3]) == 401, "delta's key refused", 20, interval_s=0.1)
    assert ingest.served() == ["acme", "beta", "gamma"]
    assert "tenants file refused" not in ingest.log()
