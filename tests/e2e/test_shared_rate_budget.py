"""Two dispatchers share the per-minute token budget through Redis, as a user runs them.

What a user gets: with ``INFERQ_COORDINATION=redis`` and the API's limit in ``INFERQ_DISPATCHER_RATE_LIMITS``,
a group of dispatchers sends the backend no more tokens a minute than the limit together, instead
of each sending up to it (and learning from 429s). A batch needing two minutes' tokens is served
in two minutes, every request OK, and the backend never answers 429 for a call past its minute.

The backend allows six calls a minute while the concurrency budget allows ten at once: dispatchers
each keeping their own minute would each start up to six of the batch's first ten calls together,
and the backend would refuse the calls past its six (`run_past_a_minute` with ``shared=False``
measures that; see the figures in the commit and docs/operations.md).

Prints its figures (run with ``-s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.tools.stack.pipeline import Pipeline
from tests.support.ledger import Ledger, request_body
from tests.support.pipeline import running_pipeline

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

BUDGET = 10
MODEL = "inferq-fast"  # realtime_chat's
# A 400-character prompt (100 tokens) and max_tokens 20: 120 tokens estimated; the simulator's answer
# uses 114 (its usage), which settles the estimate.
PROMPT = "x" * 400
CALL_TOKENS = 114
# Six calls fit in the backend's minute (684 tokens), a seventh would not (798).
TPM = 720
FIT = 6
MINUTE_MS = 60_000
# Two minutes' worth: the second half waits for the next minute.
BATCH = 2 * FIT
DEADLINE_MS = 600_000
# The second minute's calls start 61 s after the first's; the bound leaves room for a slow machine.
OUTCOMES_WAIT_S = 120.0


def chats(count: int) -> list[dict[str, Any]]:
    bodies = []
    for n in range(count):
        body = request_body("realtime_chat", PROMPT, session_id=f"s{n}", deadline_ms=DEADLINE_MS)
        body["params"] = {"max_tokens": 20}
        body["messages"][0]["content"] = f"{PROMPT[: -len(str(n))]}{n}"  # same length, each its own
        bodies.append(body)
    return bodies


@dataclass(frozen=True)
class Run:
    """What one run of the batch showed: the backend's answers, the outcomes, the dispatchers'
    rate budgets (``/healthz``)."""

    backend: dict[str, Any]
    outcomes: dict[str, dict[str, Any]]
    rate_budgets: list[dict[str, Any]]

    @property
    def statuses(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for outcome in self.outcomes.values():
            counts[outcome["status"]] = counts.get(outcome["status"], 0) + 1
        return counts

    def busiest_minute_tokens(self) -> int:
        """The most tokens of calls dispatched within one minute (the backend's sliding minute)."""
        calls = sorted(
            (o["timings"]["dispatched_at_ms"], o["usage"]["total_tokens"])
            for o in self.outcomes.values()
            if o.get("usage") is not None
        )
        return max(
            (sum(tokens for at, tokens in calls if end - MINUTE_MS < at <= end) for end, _ in calls),
            default=0,
        )


@contextlib.contextmanager
def limited_group(bootstrap: str, work_dir: Path, redis_url: str, *, shared: bool) -> Iterator[Pipeline]:
    """Two dispatchers in one group, the simulated backend limited to `TPM` (its concurrency limit
    far above the budget: every 429 is one for the minute) and the limit configured; `shared`: with
    Redis coordination, else each dispatcher on its own (today's behaviour without Redis)."""
    coordination = {"INFERQ_COORDINATION": "redis", "INFERQ_REDIS_URL": redis_url} if shared else {}
    with running_pipeline(
        bootstrap,
        work_dir,
        name="sharedrate" if shared else "localrate",
        dispatchers=2,
        budget=BUDGET,
        backend_args=["--speed", "1", "--limit", "100", "--tpm", str(TPM)],
        extra_env={
            **coordination,
            "INFERQ_DISPATCHER_RATE_LIMITS": json.dumps({MODEL: {"tpm": TPM}}),
            "INFERQ_DISPATCHER_SCHEDULE_PIN": "normal",
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
            "INFERQ_INGEST_ADMISSION_ENABLED": "false",
        },
    ) as stack:
        yield stack


def run_past_a_minute(bootstrap: str, work_dir: Path, redis_url: str, *, shared: bool) -> Run:
    """Submit `BATCH` chats to the group and wait for every outcome (bounded)."""
    with limited_group(bootstrap, work_dir, redis_url, shared=shared) as stack:
        ledger = Ledger("sharedrate")
        answers = asyncio.run(ledger.submit_all(stack.ingest_url, chats(BATCH)))
        assert [a.status for a in answers] == [202] * BATCH
        ids = [a.request_id for a in answers if a.request_id is not None]
        asyncio.run(ledger.collect(stack.results_url, OUTCOMES_WAIT_S, ids=ids))
        budgets = [
            httpx.get(f"{stack.dispatcher_url(i)}/healthz", timeout=5).json()["rate_budget"] for i in range(2)
        ]
        return Run(
            stack.backend_stats(),
            {rid: ledger.outcomes[rid] for rid in ids if rid in ledger.outcomes},
            budgets,
        )


def describe(label: str, run: Run) -> str:
    return (
        f"[{label}] {BATCH} chats, TPM {TPM} ({FIT} calls a minute), 2 dispatchers: backend "
        f"{run.backend['by_status']}, rate_limited {run.backend['rate_limited']}; outcomes {run.statuses}; "
        f"busiest minute {run.busiest_minute_tokens()} tokens; rate budgets {run.rate_budgets}"
    )


def test_two_dispatchers_together_stay_under_the_backends_tokens_per_minute(
    kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    run = run_past_a_minute(kafka_bootstrap, tmp_path, redis_url, shared=True)
    print(f"\n{describe('shared', run)}")
    # Every request answered OK, over two minutes...
    assert run.statuses == {"OK": BATCH}, run.statuses
    # ...and the backend never refused a call for its minute (nor any other).
    assert run.backend["rate_limited"] == 0, run.backend
    assert run.backend["by_status"] == {"200": BATCH}, run.backend
    # No minute held more than the limit's tokens, by what the calls used.
    assert all(o["usage"]["total_tokens"] == CALL_TOKENS for o in run.outcomes.values())
    assert run.busiest_minute_tokens() <= TPM
    # Both dispatchers counted their starts in the group's minute, Redis answering throughout.
    assert all(b["shared"] and not b["degraded"] for b in run.rate_budgets), run.rate_budgets
