"""The whole pipeline as processes on the secured broker: each service its own SCRAM principal over
TLS, held to its ACLs; a service given a wrong password stops at once and says why."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferq.tools.broker.broker import LocalBroker
from inferq.tools.broker.security import client_env
from inferq.tools.demo.workload import evening_mix, submit_all, wait_outcomes
from inferq.tools.stack.pipeline import Pipeline, PipelinePorts
from tests.support.inprocess import free_port
from tests.support.kafka import a_secured_prefix

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SERVICES = ("ingest", "dispatcher", "results")
EXIT_BOUND_S = 45.0  # interpreter start, imports and the refused login, on 2 busy cores


@pytest.fixture(scope="module")
def pipeline(secured_broker: LocalBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    prefix = a_secured_prefix(secured_broker)
    stack = Pipeline(
        bootstrap=secured_broker.bootstrap,
        work_dir=tmp_path_factory.mktemp("secure-pipeline"),
        ports=PipelinePorts(
            ingest=free_port(), results=free_port(), dispatcher=free_port(), backend=free_port()
        ),
        topic_prefix=prefix,
        budget=4,
        backend_args=["--speed", "5"],
        # Each service its own user: ingest may only write requests, results only read results.
        service_env={service: client_env(secured_broker.client_security(service)) for service in SERVICES},
    )
    try:
        stack.start()
        yield stack
    finally:
        codes = stack.stop()
        assert all(code == 0 for code in codes.values()), f"unclean exits: {codes}"


def test_every_service_works_over_sasl_ssl_as_its_own_principal(
    pipeline: Pipeline, secured_broker: LocalBroker
) -> None:
    accepted = asyncio.run(submit_all(pipeline.ingest_url, evening_mix()))
    ids = [a["request_id"] for a in accepted]
    outcomes = asyncio.run(wait_outcomes(pipeline.results_url, ids, timeout_s=90))
    assert set(outcomes) == set(ids)
    assert {o["status"] for o in outcomes.values()} == {"OK"}
    material = secured_broker.security_material
    assert material is not None
    logs = [*(pipeline.work_dir / "logs").glob("*.log"), *secured_broker.config.logs_dir.glob("*")]
    assert {p.stem for p in logs} >= {"ingest", "dispatcher-0", "results", "server"}
    for path in logs:
        text = path.read_text(errors="replace")
        for user, password in material.passwords.items():
            assert password not in text, f"the password of {user} is in {path}"


def test_a_wrong_password_stops_each_service_at_once_with_a_clear_message(
    secured_broker: LocalBroker, tmp_path: Path
) -> None:
    prefix = a_secured_prefix(secured_broker)
    wrong = "wrong-" + uuid.uuid4().hex
    started = time.monotonic()
    running: dict[str, subprocess.Popen[bytes]] = {}
    for service in SERVICES:
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": secured_broker.bootstrap,
            "INFERQ_TOPIC_PREFIX": prefix,
            "INFERQ_RESULTS_DB_PATH": str(tmp_path / "results.db"),
            **client_env(secured_broker.client_security(service)),
            "INFERQ_KAFKA_SASL_PASSWORD": wrong,
        }
        with (tmp_path / f"{service}.log").open("wb") as log:
            running[service] = subprocess.Popen(
                [sys.executable, "-m", "inferq.cli", service, "--port", str(free_port())],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
            )
    try:
        for service, proc in running.items():
            code = proc.wait(timeout=max(1.0, EXIT_BOUND_S - (time.monotonic() - started)))
            output = (tmp_path / f"{service}.log").read_text(errors="replace")
            assert code != 0, f"{service} exited 0:\n{output}"
            assert f"refused the credentials of {service} (SASL authentication failed)" in output, output
            assert wrong not in output
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
