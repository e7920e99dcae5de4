"""Preemption through the whole pipeline on the real broker: behind a backend declared preemptible,
briefs are lent every slot, chats arriving next take lent slots back, and every request is answered
OK exactly once (nothing lost, nothing twice) with the backend never running more of the
dispatcher's calls than the budget, beside the calls it abandoned (the simulated backend may go on
running a call whose client hung up)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.support.ledger import Ledger, request_body
from tests.support.pipeline import running_pipeline
from tests.support.scrape import metric_sum
from tests.support.waiting import wait_until

pytestmark = pytest.mark.kafka

BUDGET = 4


def backend_stats(url: str) -> dict[str, int]:
    return dict(httpx.get(f"{url}/stats", timeout=5).json())


def test_chats_take_back_the_slots_lent_to_briefs_and_every_request_is_answered_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    with running_pipeline(
        kafka_bootstrap,
        tmp_path,
        name="preempt",
        budget=BUDGET,
        # Briefs last seconds; the backend admits more than the budget so abandoned calls it goes on
        # running refuse nobody.
        backend_args=["--speed", "2", "--limit", str(4 * BUDGET)],
        extra_env={
            "INFERQ_BACKEND_PREEMPTIBLE": "true",
            "INFERQ_DISPATCHER_SCHEDULE_PIN": "peak",
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
        },
    ) as stack:
        ledger = Ledger("preempt")
        briefs = [request_body("morning_brief", f"brief {i}", deadline_ms=300_000) for i in range(2 * BUDGET)]
        asyncio.run(ledger.submit_all(stack.ingest_url, briefs))
        # Lent without foresight: briefs hold every slot (LOW's peak ceiling is 1).
        wait_until(
            lambda: backend_stats(stack.backend_url)["in_flight"] >= BUDGET, "briefs in every slot", 30
        )
        chats = [request_body("realtime_chat", f"chat {i}", deadline_ms=120_000) for i in range(BUDGET)]
        asyncio.run(ledger.submit_all(stack.ingest_url, chats))
        asyncio.run(ledger.collect(stack.results_url, 240))
        dispatcher = stack.dispatcher_url(0)
        preempted = metric_sum(f"{dispatcher}/metrics", "inferq_preemptions_total")
        discarded = metric_sum(f"{dispatcher}/metrics", "inferq_preempted_tokens_total")
        stats = backend_stats(stack.backend_url)

    ledger.assert_promise_kept()
    assert ledger.statuses(ledger.accepted) == {"OK": len(briefs) + len(chats)}
    assert preempted >= 1 and discarded > 0
    # Never more than the budget at once of the calls it still served, beside the abandoned ones.
    assert stats["max_in_flight"] <= BUDGET + preempted
