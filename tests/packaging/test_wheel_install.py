"""The wheel as a user installs it: built from the checkout, installed with a fresh virtualenv's own pip
into that virtualenv, and run from a folder outside the checkout. Its ingest, dispatcher and results
carry one request through the test broker (the simulated backend is the checkout's tooling).

`make test-wheel` (and .ci/run) runs it: `pytest -m wheel`."""

from __future__ import annotations

import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from inferq.tools.stack.pipeline import Pipeline
from tests.support.pipeline import running_pipeline

pytestmark = [pytest.mark.wheel, pytest.mark.kafka, pytest.mark.slow]

CHECKOUT = Path(__file__).resolve().parents[2]
TOOLING = ("testcontainers", "matplotlib", "rich")


def _run(*argv: str | Path, cwd: Path, timeout_s: float = 600) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    output = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{argv[:3]} failed ({done.returncode}):\n{output}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", out, CHECKOUT, cwd=out)
    (built,) = out.glob("inferq-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv (its own, unupgraded pip) with the wheel installed: its bin folder."""
    home = tmp_path_factory.mktemp("wheel-venv")
    base = getattr(sys, "_base_executable", sys.executable)
    _run(base, "-m", "venv", home / "venv", cwd=home)
    _run(home / "venv" / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check", wheel, cwd=home)
    return home / "venv" / "bin"


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working folder outside the checkout: nothing there can stand in for the installed files."""
    folder = tmp_path_factory.mktemp("elsewhere")
    assert CHECKOUT not in folder.parents
    return folder


def test_the_wheel_carries_its_run_time_files_under_inferq(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("inferq-")}
    assert tops == {"inferq"}, "one import package, no top-level `services` or `schemas`"
    for needed in (
        "inferq/schemas/inference_request.avsc",
        "inferq/schemas/inference_result.avsc",
        "inferq/schemas/history/inference_result.v1.avsc",
        "inferq/infra/schedule.toml",
        "inferq/infra/scenarios/evening-peak.toml",
        "inferq/infra/scenarios/bench/scheduling.toml",  # inferq bench (the tools extra)
        "inferq/infra/scenarios/bench/fairness.toml",
        "inferq/ingest/app.py",
    ):
        assert needed in names


def test_the_base_install_is_what_production_runs(installed: Path, outside: Path) -> None:
    listed = _run(installed / "pip", "list", "--format=freeze", "--disable-pip-version-check", cwd=outside)
    present = {line.split("==")[0].lower() for line in listed.splitlines()}
    assert [p for p in TOOLING if p in present] == []
    version = _run(installed / "inferq", "--version", cwd=outside).strip()
    assert version.startswith("inferq ")
    module = _run(installed / "python", "-c", "import inferq; print(inferq.__file__)", cwd=outside)
    assert "site-packages" in module and str(CHECKOUT) not in module
    # A tooling command says what to install instead of a traceback.
    done = subprocess.run(
        [installed / "inferq", "top"], cwd=outside, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "pip install 'inferq[tools]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def installed_pipeline(
    installed: Path, outside: Path, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    command = [str(installed / "inferq")]
    with running_pipeline(
        kafka_bootstrap,
        tmp_path_factory.mktemp("wheel-pipeline"),
        name="wheel",
        budget=4,
        backend_args=["--speed", "5"],
        service_command={"ingest": command, "dispatcher": command, "results": command},
        service_cwd=outside,
    ) as stack:
        yield stack


def test_one_request_goes_through_the_installed_services(
    installed_pipeline: Pipeline, installed: Path
) -> None:
    for proc in installed_pipeline.processes:
        if not proc.name.startswith("sim-backend"):
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
            assert str(installed / "inferq").encode() in cmdline, f"{proc.name} runs {cmdline}"
    request_id = f"wheel-{uuid.uuid4().hex}"
    body = {
        "scenario": "realtime_chat",
        "messages": [{"role": "user", "content": "from the wheel"}],
        "request_id": request_id,
    }
    accepted = httpx.post(f"{installed_pipeline.ingest_url}/v1/requests", json=body, timeout=10)
    assert accepted.status_code == 202, accepted.text
    outcome = httpx.get(
        f"{installed_pipeline.results_url}/v1/requests/{request_id}", params={"wait": 30}, timeout=40
    )
    assert outcome.status_code == 200, outcome.text
    assert outcome.json()["status"] == "OK"
    assert outcome.json()["output"]
