"""The alert rules and the Prometheus configuration, checked by Prometheus' own promtool.

`promtool test rules` runs infra/prometheus/tests/*.yml: each alert fires on a series that breaks
its rule for long enough and stays quiet otherwise. promtool comes from Debian's `prometheus`
package (`make prometheus`, infra/prometheus/ensure-prometheus.sh); without it these tests fail.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

PROMETHEUS_DIR = Path(__file__).resolve().parents[2] / "infra" / "prometheus"


def promtool() -> str:
    path = shutil.which("promtool")
    assert path is not None, "promtool is missing: run `make prometheus` (ensure-prometheus.sh)"
    return path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120, check=False
    )


def test_every_alert_rule_passes_its_unit_tests():
    tests = sorted(str(p.relative_to(PROMETHEUS_DIR)) for p in (PROMETHEUS_DIR / "tests").glob("*.yml"))
    assert tests, "no rule tests in infra/prometheus/tests"
    done = run("test", "rules", *tests)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_unit_test():
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tested: set[str] = set()
    for path in (PROMETHEUS_DIR / "tests").glob("*.yml"):
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", ()):
                if check.get("exp_alerts"):  # a test that only expects silence proves nothing alone
                    tested.add(check["alertname"])
    assert alerts - tested == set()
    assert len(alerts) >= 7


def test_the_configuration_and_its_rules_are_valid():
    done = run("check", "config", "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 rule files found" in done.stdout + done.stderr


def test_a_broken_rule_is_refused(tmp_path: Path):
    """The check is real: promtool refuses a rule whose expression does not parse."""
    bad = tmp_path / "bad.yml"
    bad.write_text("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: sum(rate(x[5m])\n")
    done = run("check", "rules", str(bad))
    assert done.returncode != 0
