"""`inferq batch submit` as a user runs it, against the services as processes on the real broker:
interrupted with SIGINT, then killed with SIGKILL, then run to the end. Every line ends with exactly
one outcome in the results file, a request reached ingest twice only when its send was cut by an
interruption (a counting proxy in front of ingest sees every POST) and was then queued once, and the
backend ran each request once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from inferq.batch.ledger import read_state
from inferq.messaging.codec import request_codec
from inferq.tools.stack.pipeline import Pipeline
from tests.support.inprocess import free_port
from tests.support.kafka import read_all
from tests.support.pipeline import running_pipeline
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LINES = 40


class CountingProxy:
    """Forwards to ingest and remembers the request_id of every POST /v1/requests it forwarded.
    `hold_after(n)` holds every POST beyond the n-th forwarded until `release()` (bounded), so a
    batch cannot finish before the test interrupts it, however slow the machine."""

    def __init__(self, target: str) -> None:
        self.posted: Counter[str] = Counter()
        self._limit: int | None = None
        self._released = threading.Event()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.path == "/v1/requests":
                    proxy.wait_if_held()
                    proxy.posted[json.loads(body).get("request_id", "?")] += 1
                answer = httpx.post(
                    target + self.path, content=body, headers={"content-type": "application/json"}, timeout=30
                )
                self.send_response(answer.status_code)
                for name in ("content-type", "retry-after"):
                    if name in answer.headers:
                        self.send_header(name, answer.headers[name])
                self.send_header("content-length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def hold_after(self, forwarded: int) -> None:
        self._released.clear()
        self._limit = forwarded

    def release(self) -> None:
        self._limit = None
        self._released.set()

    def wait_if_held(self) -> None:
        limit = self._limit
        if limit is not None and sum(self.posted.values()) >= limit:
            self._released.wait(timeout=60)

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    with running_pipeline(
        kafka_bootstrap,
        tmp_path_factory.mktemp("batch"),
        name="batch",
        budget=4,
        backend_args=["--speed", "20"],
        # LOW may use the whole budget at night: the test must not depend on the hour.
        extra_env={"INFERQ_DISPATCHER_SCHEDULE_PIN": "night"},
    ) as stack:
        yield stack


def start_batch(pipeline: Pipeline, proxy: CountingProxy, batch: Path, out: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "inferq.cli", "batch", "submit", str(batch), "--out", str(out)]
    args += [
        "--scenario",
        "morning_brief",
        "--rate",
        "5/s",
        "--senders",
        "2",
        "--url",
        proxy.url,
        "--results-url",
        pipeline.results_url,
    ]
    # A shell's background job (how CI may run the suite) starts with SIGINT ignored, and children
    # inherit that: give the batch a terminal's Ctrl-C, which is what this test sends.
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_kafka_batch(pipeline: Pipeline, bootstrap: str, batch: Path, out: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "inferq.cli", "batch", "submit", str(batch), "--out", str(out)]
    args += ["--scenario", "morning_brief", "--rate", "5/s", "--senders", "2", "--via", "kafka"]
    env = os.environ | {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "INFERQ_TOPIC_PREFIX": pipeline.topic_prefix}
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def until_outcomes(proc: subprocess.Popen[bytes], out: Path, at_least: int) -> None:
    def outcomes() -> int:
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        return len(read_state(out).outcomes)

    wait_until(outcomes, f"{at_least} outcomes written", 60, interval_s=0.05, done=lambda n: n >= at_least)


def test_a_batch_interrupted_then_killed_then_resumed_sends_and_runs_each_request_once(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    batch = tmp_path / "briefs.jsonl"
    batch.write_text(
        "".join(json.dumps({"prompt": f"morning brief for user {i}"}) + "\n" for i in range(LINES))
    )
    out = tmp_path / "results.jsonl"
    proxy = CountingProxy(pipeline.ingest_url)
    try:
        # Ctrl-C mid-way: a clean stop with what it has written.
        proxy.hold_after(8)
        first = start_batch(pipeline, proxy, batch, out)
        until_outcomes(first, out, 5)
        first.send_signal(signal.SIGINT)
        # The POSTs held meanwhile go on, so the stopping batch is not kept waiting for them.
        proxy.release()
        _, err = first.communicate(timeout=30)
        assert first.returncode == 130, err.decode()[-2000:]
        assert b"run the same command again to resume" in err
        assert len(read_state(out).outcomes) < LINES

        # Killed mid-way: no chance to clean up.
        proxy.hold_after(sum(proxy.posted.values()) + 8)
        second = start_batch(pipeline, proxy, batch, out)
        until_outcomes(second, out, len(read_state(out).outcomes) + 5)
        second.kill()
        proxy.release()
        second.communicate(timeout=30)
        killed_at = read_state(out)
        assert len(killed_at.outcomes) < LINES

        third = start_batch(pipeline, proxy, batch, out)
        _, err = third.communicate(timeout=180)
        assert third.returncode == 0, err.decode()[-2000:]
    finally:
        proxy.close()

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert Counter(r["line"] for r in rows) == dict.fromkeys(range(1, LINES + 1), 1)
    assert {r["status"] for r in rows} == {"OK"}
    assert all(r["attempts"] == 1 for r in rows)
    ids = {r["request_id"] for r in rows}
    assert len(ids) == LINES
    # Every request reached ingest; again only if its POST was in flight at an interruption (at most
    # one per sender, 2 here, per interruption), and then ingest answered it as a duplicate ...
    assert set(proxy.posted) == ids
    assert sum(proxy.posted.values()) - LINES <= 2 * 2
    low = f"{pipeline.topic_prefix}.requests.low"
    queued = Counter(
        request_codec().decode(m.value()).request_id
        for m in read_all(pipeline.bootstrap, low, expect=10_000, timeout_s=5)
    )
    assert {rid: n for rid, n in queued.items() if rid in ids} == dict.fromkeys(ids, 1)
    # ... so the backend ran each exactly once.
    stats = pipeline.backend_stats()
    assert stats["total"] == LINES, stats
    status = subprocess.run(
        [sys.executable, "-m", "inferq.cli", "batch", "status", str(batch), "--out", str(out)],
        capture_output=True,
        check=True,
    )
    assert (
        status.stdout.decode().strip()
        == f"{LINES} lines: {LINES} done (OK={LINES}), 0 accepted and waiting, 0 not sent yet"
    )


def test_a_kafka_batch_killed_while_outcomes_arrive_resumes_and_catches_them(
    pipeline: Pipeline, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Over Kafka there is no ingest to deduplicate: the journal alone keeps an accepted request from
    being produced again (only one being produced at the instant of the kill may be). Outcomes
    written while no batch process runs are caught by the resumed one (it follows the reply topic
    from its oldest waiting acceptance)."""
    batch = tmp_path / "briefs.jsonl"
    batch.write_text("".join(json.dumps({"prompt": f"kafka brief {i}"}) + "\n" for i in range(LINES)))
    out = tmp_path / "results.jsonl"
    backend_before = pipeline.backend_stats()["total"]
    first = start_kafka_batch(pipeline, kafka_bootstrap, batch, out)
    until_outcomes(first, out, 5)

    # Killed while some accepted requests still wait for their outcome.
    def waiting_now() -> object:
        assert first.poll() is None, "never caught with a request waiting"
        return read_state(out).waiting

    wait_until(waiting_now, "a request caught waiting", 60, interval_s=0.005)
    first.kill()
    first.communicate(timeout=30)
    killed_at = read_state(out)
    # Usually some still wait (the loop above); one may have been answered just before the kill.
    waiting = {a.request_id for a in killed_at.waiting.values()}
    # Their outcomes are written while nobody follows the reply topic (the results service has them).
    wait_until(
        lambda: {
            r
            for r in waiting
            if httpx.get(f"{pipeline.results_url}/v1/requests/{r}", timeout=5).status_code != 200
        },
        "outcomes of the requests killed waiting",
        60,
        interval_s=0.1,
        done=lambda unanswered: not unanswered,
    )
    resumed = start_kafka_batch(pipeline, kafka_bootstrap, batch, out)
    _, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err.decode()[-2000:]

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert Counter(r["line"] for r in rows) == dict.fromkeys(range(1, LINES + 1), 1)
    assert {r["status"] for r in rows} == {"OK"}
    produced = Counter(
        request_codec().decode(m.value()).request_id
        for m in read_all(
            kafka_bootstrap, f"{pipeline.topic_prefix}.requests.low", expect=10_000, timeout_s=5
        )
    )
    mine = {r["request_id"] for r in rows}
    ours = {rid: n for rid, n in produced.items() if rid in mine}
    assert set(ours) == mine
    assert sum(ours.values()) - LINES <= 2  # one per sender, for the one kill
    assert pipeline.backend_stats()["total"] - backend_before == sum(ours.values())
