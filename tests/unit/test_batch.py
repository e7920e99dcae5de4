"""The batch producer without a network: deterministic ids, bad lines, the ledger across an
interrupted run and its resume (nothing accepted is sent again), 429s waited out."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from inferq.batch.cli import bad_lines
from inferq.batch.ledger import Ledger, LedgerError, read_state
from inferq.batch.lines import batch_key, read_lines
from inferq.batch.runner import BatchRun, Pacing, parse_rate
from inferq.cli import main
from inferq.client.errors import InvalidRequestError, RefusedError
from inferq.client.models import Chunk, Handle, Outcome, Submission
from inferq.messaging.records import Status
from inferq.messaging.tiers import Tier
from tests.support.waiting import eventually


def write_batch(path: Path, n: int, *, extra: list[str] | None = None) -> Path:
    lines = [json.dumps({"prompt": f"brief for user {i}"}) for i in range(n)]
    path.write_text("\n".join(lines + (extra or [])) + "\n", encoding="utf-8")
    return path


class FakeTransport:
    """Accepts everything (after `refusals` 429s per request id); answers OK at once for ids in
    `answering` (all when None); the others wait until cancelled."""

    def __init__(self, *, answering: set[int] | None = None, refusals: int = 0) -> None:
        self.submitted: list[str] = []
        self.answering = answering
        self.refusals = refusals
        self._refused: Counter[str] = Counter()
        self.accepted = asyncio.Event()
        self.expected: list[str] = []

    async def submit(self, submission: Submission) -> Handle:
        rid = submission.request_id or ""
        self.submitted.append(rid)
        if self._refused[rid] < self.refusals:
            self._refused[rid] += 1
            raise RefusedError("tier full", status_code=429, retry_after_s=0.01)
        if "bad" in submission.messages[0]["content"]:
            raise InvalidRequestError("refused", status_code=422, problems=[{"field": "x", "problem": "y"}])
        self.accepted.set()
        return Handle(rid, Tier.LOW, expire_at_ms=2**42)

    async def wait(self, request_id: str, timeout_s: float) -> Outcome | None:
        line = int(request_id.rsplit("-", 1)[1])
        if self.answering is not None and line not in self.answering:
            await asyncio.Event().wait()
        return Outcome(request_id, Status.OK, Tier.LOW, "m", 1, output=f"out {line}")

    def stream(self, submission: Submission, timeout_s: float) -> AsyncIterator[Chunk | Outcome]:
        raise NotImplementedError

    def expect(self, request_id: str, expire_at_ms: int) -> None:
        self.expected.append(request_id)

    async def aclose(self) -> None:
        pass


def results(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def test_request_ids_are_deterministic_per_file_and_batch_id(tmp_path: Path) -> None:
    a = write_batch(tmp_path / "a.jsonl", 3)
    b = tmp_path / "b.jsonl"
    b.write_bytes(a.read_bytes())
    ids = [line.request_id for line in read_lines(a, key=batch_key(a), scenario="batch")]
    assert ids == [line.request_id for line in read_lines(b, key=batch_key(b), scenario="batch")]
    assert len(set(ids)) == 3
    assert ids[0].endswith("-1") and ids[2].endswith("-3")
    # Another batch id (e.g. tomorrow's run of the same file), or other content: other ids.
    other = [line.request_id for line in read_lines(a, key=batch_key(a, "2026-12-02"), scenario="batch")]
    assert not set(other) & set(ids)
    write_batch(b, 4)
    assert not {line.request_id for line in read_lines(b, key=batch_key(b), scenario="batch")} & set(ids)


def test_a_line_may_name_its_own_request_id_scenario_and_fields(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    body = {
        "request_id": "mine-1",
        "scenario": "realtime_chat",
        "messages": [{"role": "user", "content": "x"}],
    }
    path.write_text(json.dumps(body | {"params": {"max_tokens": 5}}) + "\n")
    (line,) = read_lines(path, key="k", scenario="morning_brief")
    assert line.request_id == "mine-1"
    assert line.submission is not None and line.submission.scenario == "realtime_chat"
    assert line.submission.params == {"max_tokens": 5}


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"other": 1}', "messages"),
        ('{"messages": [{"role": "bot", "content": "x"}]}', "messages.0.role"),
        ('{"prompt": "x", "messages": []}', "prompt or messages"),
        ('{"prompt": "x", "params": {"stream": true}}', "params.stream"),
        ('{"prompt": "x", "tenant": "someone-else"}', "tenant"),
        ('{"prompt": "x", "request_id": "has spaces"}', "request_id"),
        ('{"prompt": "x", "deadline_ms": "soon"}', "deadline_ms"),
    ],
)
def test_bad_lines_are_reported_with_their_number(tmp_path: Path, text: str, named: str) -> None:
    path = write_batch(tmp_path / "f.jsonl", 2, extra=[text])
    lines = list(read_lines(path, key="k", scenario="batch"))
    bad = bad_lines(lines)
    assert [b.number for b in bad] == [3]
    assert named in (bad[0].problem or "")


def test_lines_that_are_not_text_or_far_too_long_are_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    huge = json.dumps({"prompt": "x" * (3 * 1024 * 1024)}).encode()
    path.write_bytes(
        b'{"prompt": "ok"}\n' + b'{"prompt": "\xff\xfe"}\n' + huge + b"\n" + b'{"prompt": "ok too"}'
    )
    lines = list(read_lines(path, key="k", scenario="batch"))
    assert [(b.number, b.problem) for b in bad_lines(lines)] == [
        (2, "not UTF-8 text"),
        (3, "line is longer than 2097152 bytes"),
    ]
    assert [line.number for line in lines if line.submission is not None] == [1, 4]


def test_a_repeated_request_id_is_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_text('{"prompt": "a", "request_id": "r1"}\n\n{"prompt": "b", "request_id": "r1"}\n')
    bad = bad_lines(list(read_lines(path, key="k", scenario="batch")))
    assert [(b.number, b.problem) for b in bad] == [(3, "request_id 'r1' is line 1's too")]


def test_stop_on_a_bad_line_sends_nothing_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_batch(tmp_path / "f.jsonl", 3, extra=['{"prompt": 5}'])
    out = tmp_path / "out.jsonl"
    # Nothing listens there: a single request sent would fail differently.
    code = main(
        ["batch", "submit", str(path), "--out", str(out), "--url", "http://127.0.0.1:9", "--no-progress"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert f"{path}:4: messages.0.content" in err
    assert "nothing sent" in err
    assert read_state(out).accepted == {}


def test_skip_writes_bad_lines_as_outcomes_and_sends_the_rest(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "f.jsonl", 3, extra=["{oops"])
    out = tmp_path / "out.jsonl"
    lines = list(read_lines(path, key="k", scenario="batch"))
    ledger = Ledger(out, "k")
    for b in bad_lines(lines):
        ledger.outcome(b.number, b.request_id, "BAD_LINE", error=b.problem)
    fake = FakeTransport()
    asyncio.run(BatchRun(fake, ledger, lines[:3], pacing=Pacing()).run())
    ledger.close()
    by_line = {r["line"]: r["status"] for r in results(out)}
    assert by_line == {1: "OK", 2: "OK", 3: "OK", 4: "BAD_LINE"}
    assert len(fake.submitted) == 3


def test_an_interrupted_batch_resumes_without_sending_anything_accepted_again(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "f.jsonl", 6)
    out = tmp_path / "out.jsonl"
    key = batch_key(path)
    lines = list(read_lines(path, key=key, scenario="batch"))

    async def first_run() -> FakeTransport:
        # Lines 1-2 are answered; 3 and 4 are accepted but never answered; the run is cut (Ctrl-C)
        # once four were accepted, before 5 and 6 are sent (a slow rate).
        fake = FakeTransport(answering={1, 2})
        ledger = Ledger(out, key)
        run = BatchRun(fake, ledger, lines, pacing=Pacing(rate_per_s=1000))
        task = asyncio.create_task(run.run())
        await eventually(
            lambda: len(fake.submitted) >= 4 and len(ledger.state.outcomes) >= 2,
            "4 sent, 2 answered",
            10,
            interval_s=0.001,
        )
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        ledger.close()
        return fake

    first = asyncio.run(first_run())
    state = read_state(out)
    assert set(state.outcomes) == {1, 2}
    assert set(state.waiting) >= {3, 4}
    second = FakeTransport()
    ledger = Ledger(out, key)
    asyncio.run(BatchRun(second, ledger, lines, pacing=Pacing()).run())
    ledger.close()
    assert not set(second.submitted) & set(first.submitted), "an accepted request was sent again"
    # The ones accepted before were announced to the transport before any wait (Kafka catches them).
    assert set(second.expected) == {lines[n - 1].request_id for n in state.waiting}
    assert sorted(first.submitted + second.submitted) == sorted(line.request_id for line in lines)
    written = Counter(r["line"] for r in results(out))
    assert written == dict.fromkeys(range(1, 7), 1)
    # A third run has nothing to do.
    third = FakeTransport()
    ledger = Ledger(out, key)
    asyncio.run(BatchRun(third, ledger, lines, pacing=Pacing()).run())
    ledger.close()
    assert third.submitted == []


def test_several_senders_send_each_line_once(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "f.jsonl", 50)
    lines = list(read_lines(path, key="k", scenario="batch"))
    fake = FakeTransport(refusals=1)
    ledger = Ledger(tmp_path / "out.jsonl", "k")
    run = BatchRun(fake, ledger, lines, pacing=Pacing(rate_per_s=10_000, min_retry_s=0.001), senders=4)
    assert asyncio.run(run.run()) == {"OK": 50}
    ledger.close()
    # Each was refused once, then accepted once: never sent after its acceptance.
    assert Counter(fake.submitted) == {line.request_id: 2 for line in lines}
    assert Counter(r["line"] for r in results(tmp_path / "out.jsonl")) == dict.fromkeys(range(1, 51), 1)


def test_429_is_waited_out_and_the_same_request_sent_again(tmp_path: Path) -> None:
    path = write_batch(tmp_path / "f.jsonl", 2)
    lines = list(read_lines(path, key="k", scenario="batch"))
    fake = FakeTransport(refusals=2)
    ledger = Ledger(tmp_path / "out.jsonl", "k")
    counts = asyncio.run(BatchRun(fake, ledger, lines, pacing=Pacing(min_retry_s=0.001)).run())
    ledger.close()
    assert counts == {"OK": 2}
    assert Counter(fake.submitted) == {lines[0].request_id: 3, lines[1].request_id: 3}


def test_a_line_inferq_refuses_is_an_invalid_outcome(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_text('{"prompt": "fine"}\n{"prompt": "bad one"}\n')
    lines = list(read_lines(path, key="k", scenario="batch"))
    ledger = Ledger(tmp_path / "out.jsonl", "k")
    asyncio.run(BatchRun(FakeTransport(), ledger, lines, pacing=Pacing()).run())
    ledger.close()
    rows = {r["line"]: r for r in results(tmp_path / "out.jsonl")}
    assert rows[2]["status"] == "INVALID" and rows[2]["problems"] == [{"field": "x", "problem": "y"}]


def test_a_torn_last_line_is_cut_and_another_batch_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    ledger = Ledger(out, "k1")
    ledger.outcome(1, "r1", "OK")
    ledger.close()
    with out.open("a") as f:
        f.write('{"line": 2, "request_id": "r2", "sta')
    ledger = Ledger(out, "k1")
    assert set(ledger.state.outcomes) == {1}
    ledger.outcome(2, "r2", "OK")
    ledger.close()
    assert [r["line"] for r in results(out)] == [1, 2]
    with pytest.raises(LedgerError, match="holds batch k1"):
        Ledger(out, "k2")


def test_status_says_where_the_batch_stands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_batch(tmp_path / "f.jsonl", 4)
    out = tmp_path / "out.jsonl"
    ledger = Ledger(out, "k")
    ledger.accepted(1, "r1", 1)
    ledger.accepted(2, "r2", 1)
    ledger.outcome(1, "r1", "OK")
    ledger.close()
    assert main(["batch", "status", str(path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == "4 lines: 1 done (OK=1), 1 accepted and waiting, 2 not sent yet"


@pytest.mark.parametrize(
    ("text", "per_s"), [("50", 50.0), ("20/s", 20.0), ("600/min", 10.0), ("3600/h", 1.0)]
)
def test_rates(text: str, per_s: float) -> None:
    assert parse_rate(text) == per_s


@pytest.mark.parametrize("text", ["0", "-1", "x/s", "5/day", "inf", "nan"])
def test_bad_rates(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)
