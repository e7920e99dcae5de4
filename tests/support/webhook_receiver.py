"""A local webhook receiver for tests: a threaded HTTP server on 127.0.0.1 recording every POST.

Paths choose the answer: ``/ok/...`` 200; ``/flaky/N/...`` 503 for the first N attempts of each
delivery id, then 200; ``/down/...`` 500 always; ``/gone/...`` 410; ``/hold/...`` 503 while `held`
is set, 200 after; ``/redirect/...`` 302 to ``/ok/``; ``/slow/...`` 200 after 3 s; ``/tarpit/...``
reads the request and never answers (the connection is held until the sender gives up, or the
receiver stops): `holding` is how many it holds now, `most_held` the most it held at once.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from inferq.tools.stack.pipeline import Pipeline
from tests.support.pipeline import running_pipeline
from tests.support.tenants import TenantSpec, write_tenants
from tests.support.waiting import wait_until

# The settings a pipeline needs to deliver to this receiver (http, on loopback): for tests only.
LOOPBACK_WEBHOOKS = {"INFERQ_WEBHOOK_ALLOW_HTTP": "true", "INFERQ_WEBHOOK_ALLOW_PRIVATE_ADDRESSES": "true"}


@contextmanager
def webhook_pipeline(
    kafka_bootstrap: str, work_dir: Path, *specs: TenantSpec, name: str, retry_period_s: float
) -> Iterator[Pipeline]:
    """A running pipeline (budget 4, a brisk simulated backend) serving the tenants `specs`, its
    webhooks delivered to loopback receivers with quick retries (`quick_webhooks_env`)."""
    tenants_file = write_tenants(work_dir / "tenants.toml", *specs)
    env = {"INFERQ_TENANTS_FILE": str(tenants_file), **quick_webhooks_env(retry_period_s)}
    with running_pipeline(
        kafka_bootstrap, work_dir, name=name, budget=4, backend_args=["--speed", "5"], extra_env=env
    ) as pipeline:
        yield pipeline


def quick_webhooks_env(retry_period_s: float) -> dict[str, str]:
    """`LOOPBACK_WEBHOOKS`, with retries and outbox reads a test can wait for."""
    return LOOPBACK_WEBHOOKS | {
        "INFERQ_WEBHOOK_FIRST_BACKOFF_S": "0.2",
        "INFERQ_WEBHOOK_MAX_BACKOFF_S": "0.5",
        "INFERQ_WEBHOOK_RETRY_PERIOD_S": str(retry_period_s),
        "INFERQ_WEBHOOK_POLL_INTERVAL_S": "0.2",
    }


@dataclass(frozen=True)
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    # When it arrived (time.time_ns(), the machine's clock, as the results' timings use).
    received_at_ns: int = 0


class Receiver:
    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        self.held = threading.Event()
        self._lock = threading.Lock()
        self._attempts: Counter[str] = Counter()
        self.port = 0
        # Set when the receiver stops: the tarpit lets its connections go.
        self.closing = threading.Event()
        self.holding = 0
        self.most_held = 0
        self.holds: list[str] = []

    def tarpit(self, connection: socket.socket) -> None:
        """Hold `connection` without answering until the receiver stops or the sender hangs up."""
        with self._lock:
            self.holding += 1
            self.most_held = max(self.most_held, self.holding)
            self.holds.append(f"+{time.time():.2f}")
        try:
            while not self.closing.is_set():
                # Wakes as soon as the sender hangs up (its attempt's timeout), not a poll later.
                readable, _, _ = select.select([connection], [], [], 0.2)
                if readable and not connection.recv(1, socket.MSG_PEEK):
                    return
        finally:
            with self._lock:
                self.holding -= 1
                self.holds.append(f"-{time.time():.2f}")

    def answer(self, path: str, delivery_id: str) -> int:
        with self._lock:
            self._attempts[delivery_id] += 1
            attempt = self._attempts[delivery_id]
        kind = path.strip("/").split("/")
        if kind[0] == "flaky":
            return 503 if attempt <= int(kind[1]) else 200
        return {"ok": 200, "down": 500, "gone": 410}.get(kind[0], 503 if self.held.is_set() else 200)

    def record(self, delivery: Delivery) -> None:
        with self._lock:
            self.deliveries.append(delivery)

    def to(self, path: str) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if d.path == path]

    def wait_for(
        self, path: str, *, count: int = 1, status: int | None = None, timeout_s: float = 30.0
    ) -> list[Delivery]:
        """The deliveries to `path` once at least `count` (answered `status`, if given) arrived."""
        wait_until(
            lambda: [d for d in self.to(path) if status is None or d.status == status],
            f"{count} deliveries to {path}",
            timeout_s,
            interval_s=0.05,
            done=lambda found: len(found) >= count,
            detail=lambda: self.to(path),
        )
        return self.to(path)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = self.rfile.read(min(length, 1_048_576))
            kind = self.path.strip("/").split("/")[0]
            if kind == "tarpit":
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver.record(Delivery(self.path, headers, body, 0, time.time_ns()))
                receiver.tarpit(self.connection)
                self.close_connection = True
                return
            delivery_id = self.headers.get("webhook-id", "")
            status = 302 if kind == "redirect" else receiver.answer(self.path, delivery_id)
            headers = {k.lower(): v for k, v in self.headers.items()}
            receiver.record(Delivery(self.path, headers, body, status, time.time_ns()))
            if kind == "slow":
                time.sleep(3)
            self.send_response(status)
            if status == 302:
                self.send_header("location", receiver.url("/ok/redirected"))
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.closing.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
