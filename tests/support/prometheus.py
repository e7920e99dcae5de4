"""A real Prometheus for a test: Debian's binary, its own data directory and free port, and a
configuration generated from infra/prometheus/prometheus.yml with the test's targets and short
intervals. Queried over its HTTP API, every wait bounded."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.inprocess import free_port
from tests.support.waiting import wait_until

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "infra" / "prometheus"


def config_for(targets: Mapping[str, Sequence[str]], *, interval: str = "1s") -> dict[str, Any]:
    """infra/prometheus/prometheus.yml with each job's targets replaced by `targets` (job name to
    host:port), the rules read from infra/prometheus, and `interval` for scrapes and evaluations."""
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = interval
    config["global"]["evaluation_interval"] = interval
    config["rule_files"] = [str(PROMETHEUS_DIR / name) for name in config["rule_files"]]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    unknown = set(targets) - set(jobs)
    assert not unknown, f"jobs not in prometheus.yml: {unknown}"
    for name, job in jobs.items():
        job["static_configs"] = [{"targets": list(targets.get(name, ()))}]
    return config


@dataclass
class Prometheus:
    url: str
    log_path: Path

    def api(self, path: str, **params: str) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10.0)
        body = response.json()
        assert body.get("status") == "success", f"{path} {params}: {response.status_code} {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def wait_for(self, what: str, check: Callable[[], Any], timeout_s: float = 30.0) -> Any:
        """Poll `check` until it returns something truthy, at most `timeout_s`."""
        return wait_until(check, what, timeout_s, interval_s=0.5, detail=lambda: self.log_tail(15))

    def log_tail(self, lines: int) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def running_prometheus(work_dir: Path, config: Mapping[str, Any]) -> Iterator[Prometheus]:
    """Debian's prometheus on a free loopback port with `config`; stopped (SIGTERM) at the end."""
    binary = shutil.which("prometheus")
    assert binary is not None, "prometheus is missing: run `make prometheus` (ensure-prometheus.sh)"
    work_dir.mkdir(parents=True, exist_ok=True)
    config_path = work_dir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    port = free_port()
    log_path = work_dir / "prometheus.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={work_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    prometheus = Prometheus(f"http://127.0.0.1:{port}", log_path)
    try:

        def ready() -> bool:
            assert proc.poll() is None, f"prometheus exited {proc.returncode}: {log_path.read_text()[-2000:]}"
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{prometheus.url}/-/ready", timeout=1.0).status_code == 200
            return False

        wait_until(ready, "prometheus ready", 30, interval_s=0.2, detail=lambda: log_path.read_text()[-2000:])
        yield prometheus
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
