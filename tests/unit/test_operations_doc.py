"""docs/operations.md lists every metric a service defines.

The names come from the services' source (every ``meter.create_*("inferq_...")`` call outside the
tooling), so an instrument that has seen no traffic yet, and so is absent from a scrape, still
counts; the Prometheus end-to-end test checks what a real scrape finds against the same page.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"
INSTRUMENT_FACTORIES = {
    "create_counter",
    "create_up_down_counter",
    "create_histogram",
    "create_gauge",
    "create_observable_gauge",
    "create_observable_counter",
    "create_observable_up_down_counter",
}


def defined_metrics() -> dict[str, Path]:
    """Every metric name a service defines, and the file defining it."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / "services").rglob("*.py")):
        if "tools" in path.relative_to(ROOT / "services").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in INSTRUMENT_FACTORIES
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found[node.args[0].value] = path
    return found


def documented_metrics() -> set[str]:
    """The metric names in the first column of the page's tables."""
    return set(re.findall(r"^\| `(inferq_[a-z0-9_]+)` \|", DOC.read_text(), flags=re.MULTILINE))


def test_the_scan_finds_the_services_instruments():
    names = defined_metrics()
    # One of each kind, from each service: a scan that found nothing would pass the next test.
    for name in ("inferq_queue_wait_seconds", "inferq_ingest_accepted_total", "inferq_results_stored_total"):
        assert name in names
    assert len(names) >= 30


def test_every_metric_a_service_defines_is_documented():
    missing = {name: str(path.relative_to(ROOT)) for name, path in defined_metrics().items()}
    for name in documented_metrics():
        missing.pop(name, None)
    assert missing == {}, f"metrics missing from docs/operations.md: {missing}"


def test_names_follow_prometheus_conventions():
    for name, path in defined_metrics().items():
        assert name.startswith("inferq_"), (name, path)
        assert re.fullmatch(r"[a-z][a-z0-9_]*", name), (name, path)
        assert not name.endswith("_ms"), f"{name}: durations are in seconds ({path})"
