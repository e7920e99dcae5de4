"""Steady traffic into ingest while something breaks: threads that keep POSTing requests, each with
its own request id, and remember every answer (status, when sent, when answered)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import TracebackType

import httpx

# Long enough that nothing expires while a broker is down: what is measured is loss, not expiry.
DEADLINE_MS = 180_000
_JOIN_S = 20.0


@dataclass(frozen=True, slots=True)
class Submitted:
    """Ingest's answer to one submission; `status` None: no HTTP answer at all."""

    request_id: str
    status: int | None
    sent_at: float  # time.monotonic()
    answered_at: float


class Traffic:
    """`threads` submitters, each sending a request, then waiting `interval_s`, until stopped.

    Half chat (HIGH), half emotion analysis (MEDIUM), every one with a deadline of `DEADLINE_MS`; the
    request ids are ``<run_id>:<thread>-<n>``, so a run's results are found by their id."""

    def __init__(self, ingest_url: str, run_id: str, *, threads: int = 6, interval_s: float = 0.2) -> None:
        self._url = ingest_url
        self._run_id = run_id
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._answers: list[Submitted] = []
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"traffic-{i}", daemon=True)
            for i in range(threads)
        ]

    def _run(self, index: int) -> None:
        scenarios = ("realtime_chat", "emotion_analysis")
        with httpx.Client(base_url=self._url, timeout=15.0) as client:
            n = 0
            while not self._stop.is_set():
                rid = f"{self._run_id}:{index}-{n}"
                body = {
                    "scenario": scenarios[n % 2],
                    "session_id": f"s{index}-{n % 7}",
                    "request_id": rid,
                    "deadline_ms": DEADLINE_MS,
                    "messages": [{"role": "user", "content": f"message {n}"}],
                }
                sent = time.monotonic()
                try:
                    status: int | None = client.post("/v1/requests", json=body).status_code
                except httpx.HTTPError:
                    status = None
                with self._lock:
                    self._answers.append(Submitted(rid, status, sent, time.monotonic()))
                n += 1
                self._stop.wait(self._interval_s)

    def answers(self) -> list[Submitted]:
        with self._lock:
            return list(self._answers)

    def accepted(self) -> list[str]:
        return [a.request_id for a in self.answers() if a.status == 202]

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=_JOIN_S)
        hung = [t.name for t in self._threads if t.is_alive()]
        if hung and exc is None:
            raise RuntimeError(f"submitters hung past their client timeout: {hung}")
