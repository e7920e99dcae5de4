"""The promise "nothing lost, nothing twice", counted per test.

A `Ledger` records every request the pipeline accepted (an HTTP 202 from ingest, or a record the
broker acknowledged for a producer writing to Kafka directly) and every refusal; then what callers
can see: the terminal outcome of each accepted request from the results API, read more than once.
It also reads the results topic itself, so a test can say how many duplicate outcomes the results
store absorbed on the way.

    lost                        accepted, but no terminal outcome after the bounded wait
    caller-visible duplicates   a request_id answered with two different outcomes over repeated
                                reads, or stored in more than one row
    absorbed                    extra outcome records on the results topic, dropped by the store
    not first                   the outcome served differs from the first one on the results topic
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from inferq.messaging.codec import result_codec
from inferq.tools.chaos.account import extra_rows, read_outcomes
from tests.support.kafka import read_all


def request_body(
    scenario: str,
    text: str = "hello",
    *,
    session_id: str | None = None,
    deadline_ms: int | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """A `POST /v1/requests` body."""
    body: dict[str, Any] = {"scenario": scenario, "messages": [{"role": "user", "content": text}]}
    if session_id is not None:
        body["session_id"] = session_id
    if deadline_ms is not None:
        body["deadline_ms"] = deadline_ms
    if request_id is not None:
        body["request_id"] = request_id
    return body


@dataclass(frozen=True)
class Answer:
    """Ingest's answer to one submission; `status` None means no HTTP answer at all."""

    request_id: str | None
    status: int | None
    sent_at: float  # time.monotonic()
    answered_at: float
    retry_after: str | None = None
    error: str = ""

    @property
    def seconds(self) -> float:
        return self.answered_at - self.sent_at


@dataclass(frozen=True)
class Tally:
    accepted: int
    refused: dict[int, int]
    unanswered: int
    terminal: dict[str, int]
    lost: int
    caller_duplicates: int
    topic_records: int
    absorbed: int
    conflicting: int
    not_first: int
    never_produced: int
    refused_but_served: int


@dataclass
class Ledger:
    name: str
    accepted: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: list[Answer] = field(default_factory=list)
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Caller-visible: later reads of a request_id that differed from the first terminal answer.
    changed: dict[str, list[dict[str, Any] | None]] = field(default_factory=dict)
    # Rows per request_id in the results database, for ids stored more than once.
    extra_rows: dict[str, int] = field(default_factory=dict)
    # Every record on the results topic, per request_id, in partition (so production) order.
    topic_outcomes: dict[str, list[dict[str, Any]]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # -- what was promised ------------------------------------------------------------------------

    def accept(self, request_id: str, info: dict[str, Any] | None = None) -> None:
        """A request the pipeline now owes an outcome (a 202, or a record the broker acknowledged).
        A `tenant` in `info` is the tenant the outcome is read as (open mode's ``?tenant=``)."""
        with self._lock:
            self.accepted[request_id] = info or {}

    def record(self, answer: Answer, info: dict[str, Any] | None = None) -> None:
        with self._lock:
            self.answers.append(answer)
            if answer.status == 202 and answer.request_id is not None:
                self.accepted[answer.request_id] = info or {}

    def submit(self, client: httpx.Client, body: dict[str, Any]) -> Answer:
        """POST one request with a blocking client (for submitter threads) and record the answer."""
        sent = time.monotonic()
        try:
            response = client.post("/v1/requests", json=body)
        except httpx.HTTPError as exc:
            answer = Answer(body.get("request_id"), None, sent, time.monotonic(), error=repr(exc))
            self.record(answer)
            return answer
        answer = _answer(body, response, sent)
        self.record(answer, _info(body, response))
        return answer

    async def submit_all(
        self, ingest_url: str, bodies: list[dict[str, Any]], *, concurrency: int = 32
    ) -> list[Answer]:
        """POST every body (at most `concurrency` at once) and record each answer."""
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=ingest_url, timeout=15.0) as client:

            async def one(body: dict[str, Any]) -> Answer:
                async with gate:
                    sent = time.monotonic()
                    try:
                        response = await client.post("/v1/requests", json=body)
                    except httpx.HTTPError as exc:
                        answer = Answer(body.get("request_id"), None, sent, time.monotonic(), error=repr(exc))
                        self.record(answer)
                        return answer
                    answer = _answer(body, response, sent)
                    self.record(answer, _info(body, response))
                    return answer

            return list(await asyncio.gather(*(one(b) for b in bodies)))

    # -- what callers see ---------------------------------------------------------------------------

    async def collect(
        self, results_url: str, timeout_s: float, *, ids: Iterable[str] | None = None, rereads: int = 0
    ) -> None:
        """Poll the results API until every accepted request (or every one of `ids`) has a terminal
        outcome or `timeout_s` passes; then read each outcome `rereads` more times."""
        wanted = list(ids) if ids is not None else list(self.accepted)
        tenants = {rid: info["tenant"] for rid, info in self.accepted.items() if info.get("tenant")}
        _, changed = await read_outcomes(
            results_url, wanted, timeout_s, found=self.outcomes, tenants=tenants, rereads=rereads
        )
        for rid, views in changed.items():
            self.changed.setdefault(rid, []).extend(views)

    def count_store_rows(self, db_path: Path) -> None:
        """Rows per request_id in the results service's SQLite file (read-only, beside the service)."""
        self.extra_rows = extra_rows(db_path)

    def read_results_topic(self, bootstrap: str, topic: str, timeout_s: float = 30.0) -> None:
        """Every outcome record on the results topic, grouped by request_id."""
        codec = result_codec().avro  # as written, field by field
        grouped: dict[str, list[dict[str, Any]]] = {}
        for message in read_all(bootstrap, topic, timeout_s=timeout_s):
            record = codec.decode(message.value() or b"")
            grouped.setdefault(str(record["request_id"]), []).append(record)
        self.topic_outcomes = grouped

    # -- the account -------------------------------------------------------------------------------

    def statuses(self, ids: Iterable[str]) -> Counter[str]:
        return Counter(self.outcomes[rid]["status"] if rid in self.outcomes else "LOST" for rid in ids)

    def lost_ids(self) -> list[str]:
        return [rid for rid in self.accepted if rid not in self.outcomes]

    def tally(self) -> Tally:
        topic = self.topic_outcomes or {}
        mine = {rid: topic.get(rid, []) for rid in self.accepted}
        not_first = 0
        for rid, view in self.outcomes.items():
            first = mine.get(rid, [])[:1]
            if first and (first[0]["status"], first[0]["completed_at_ms"]) != (
                view["status"],
                view["timings"]["completed_at_ms"],
            ):
                not_first += 1
        refused_ids = {a.request_id for a in self.answers if a.status != 202 and a.request_id is not None}
        return Tally(
            accepted=len(self.accepted),
            refused=dict(Counter(a.status for a in self.answers if a.status not in (None, 202))),
            unanswered=sum(1 for a in self.answers if a.status is None),
            terminal=dict(Counter(v["status"] for v in self.outcomes.values())),
            lost=len(self.lost_ids()),
            caller_duplicates=len(set(self.changed) | set(self.extra_rows)),
            topic_records=sum(len(records) for records in mine.values()),
            absorbed=sum(len(records) - 1 for records in mine.values() if records),
            conflicting=sum(1 for records in mine.values() if len({r["status"] for r in records}) > 1),
            not_first=not_first,
            never_produced=sum(1 for rid in self.lost_ids() if not mine.get(rid)),
            refused_but_served=sum(1 for rid in refused_ids - set(self.accepted) if rid in topic),
        )

    def report(self) -> str:
        t = self.tally()
        terminal = " ".join(f"{s} {t.terminal.get(s, 0)}" for s in ("OK", "EXPIRED", "EVICTED", "FAILED"))
        lines = [
            f"[{self.name}] accepted {t.accepted} | refused {t.refused or 0} | no answer {t.unanswered}",
            f"[{self.name}] terminal: {terminal} | lost {t.lost} | caller-visible duplicates "
            f"{t.caller_duplicates}",
        ]
        if self.topic_outcomes is not None:
            lines.append(
                f"[{self.name}] results topic: {t.topic_records} records for accepted requests, "
                f"{t.absorbed} duplicates absorbed by the store ({t.conflicting} with a different status), "
                f"served outcome not the first: {t.not_first}, refused (no 202) yet served: "
                f"{t.refused_but_served}"
            )
        return "\n".join(lines)

    def assert_promise_kept(self) -> None:
        """Every accepted request has exactly one terminal outcome its caller can see."""
        t = self.tally()
        lost = self.lost_ids()
        assert t.lost == 0, (
            f"{t.lost} of {t.accepted} accepted requests have no terminal outcome "
            f"({t.never_produced} never reached the results topic), e.g. {lost[:5]}"
        )
        assert t.caller_duplicates == 0, (
            f"callers saw a second outcome: changed answers {dict(list(self.changed.items())[:3])}, "
            f"extra rows {dict(list(self.extra_rows.items())[:3])}"
        )
        assert t.not_first == 0, f"{t.not_first} requests are served an outcome other than the first produced"


def _answer(body: dict[str, Any], response: httpx.Response, sent: float) -> Answer:
    request_id = body.get("request_id")
    if response.status_code == 202:
        request_id = response.json()["request_id"]
    return Answer(
        request_id,
        response.status_code,
        sent,
        time.monotonic(),
        retry_after=response.headers.get("retry-after"),
    )


def _info(body: dict[str, Any], response: httpx.Response) -> dict[str, Any]:
    if response.status_code != 202:
        return {}
    info: dict[str, Any] = response.json() | {"scenario": body["scenario"]}
    return info
