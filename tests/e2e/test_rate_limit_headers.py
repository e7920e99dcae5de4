"""The backend's rate-limit headers through the whole pipeline, with no ``INFERQ_DISPATCHER_RATE_LIMITS`` set.

What a user gets: a backend limited in tokens or requests per minute (the simulated one with
``--tpm``/``--rpm``, answering with OpenAI's ``x-ratelimit-*`` headers, and 429 with ``retry-after``
past its minute) is not flooded by the dispatcher. It learns the limit from the first answers and
keeps the rest of a batch larger than the minute queued for the next minute, instead of sending
calls that come back 429 and, after three attempts, FAILED: every request ends OK or is still
waiting, and the only 429s are for calls that started before the first answer came back (at most
the concurrency budget less what the minute allows), however large the batch. A 429 with
``retry-after`` holds the model's starts until it has passed: no call reaches the backend while it
lasts (the requests refused wait for the next minute, not retried into a storm).

Each test prints its figures (run with ``-s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.tools.stack.pipeline import Pipeline
from tests.support.ledger import Ledger, request_body
from tests.support.pipeline import running_pipeline
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

BUDGET = 10
# A chat at the simulator: a 400-character prompt (100 tokens) and its answer, "sim reply to: " and
# the prompt's first 40 characters (14 tokens): 114 tokens, as `usage` says.
PROMPT = "x" * 400
CALL_TOKENS = 114
# Ten calls fit in the minute (1140 tokens), an eleventh would not (1254).
TPM = 1200
FIT = TPM // CALL_TOKENS
# Seconds the test watches the backend after the minute's answers, for calls the retry-after forbids.
HOLD_WATCH_S = 5.0
# A long deadline: a request waiting for the next minute must not expire meanwhile.
DEADLINE_MS = 600_000
# After the last answer we wait for, a start past the minute would have been answered 429 by now.
SETTLE_S = 3.0


def chats(label: str, count: int) -> list[dict[str, Any]]:
    bodies = []
    for n in range(count):
        body = request_body("realtime_chat", PROMPT, deadline_ms=DEADLINE_MS)
        body["params"] = {"max_tokens": 20}
        body["messages"][0]["content"] = f"{PROMPT[: -len(str(n))]}{n}"  # same length, each its own
        bodies.append(body)
    return bodies


def backend_stats(url: str) -> dict[str, Any]:
    stats: dict[str, Any] = httpx.get(f"{url}/stats", timeout=5).json()
    return stats


def answered_ok(url: str) -> int:
    return int(backend_stats(url)["by_status"].get("200", 0))


@contextlib.contextmanager
def limited_pipeline(bootstrap: str, work_dir: Path, name: str, *limit: str) -> Iterator[Pipeline]:
    """The pipeline with the simulated backend limited per minute (`limit`, e.g. ``--tpm 1200``)
    and its concurrency limit far above the budget, so every 429 is one for the minute; no
    `INFERQ_DISPATCHER_RATE_LIMITS`, no adaptive budget, no ingest admission, the normal window."""
    with running_pipeline(
        bootstrap,
        work_dir,
        name=name,
        budget=BUDGET,
        backend_args=["--speed", "1", "--limit", "100", *limit],
        extra_env={
            "INFERQ_DISPATCHER_SCHEDULE_PIN": "normal",
            "INFERQ_DISPATCHER_ADAPTIVE": "false",
            "INFERQ_INGEST_ADMISSION_ENABLED": "false",
        },
    ) as stack:
        yield stack


def read_outcomes(ledger: Ledger, results_url: str, ids: list[str]) -> Counter[str]:
    """One read of every request's outcome; "WAITING" for those with none yet."""
    asyncio.run(ledger.collect(results_url, 0, ids=ids))
    return Counter(ledger.outcomes[rid]["status"] if rid in ledger.outcomes else "WAITING" for rid in ids)


def test_a_batch_larger_than_the_minute_is_not_sent_past_the_limit_the_headers_gave(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    batch = 3 * FIT
    with limited_pipeline(kafka_bootstrap, tmp_path, "ratehdr", "--tpm", str(TPM)) as stack:
        ledger = Ledger("ratehdr")
        started = time.monotonic()
        answers = asyncio.run(ledger.submit_all(stack.ingest_url, chats("tpm", batch)))
        assert [a.status for a in answers] == [202] * batch
        ids = [a.request_id for a in answers if a.request_id is not None]

        # The minute's tokens are used: FIT calls answered OK (the simulator counts them on arrival).
        # The bounds keep the backend's figures within its first minute (45 + SETTLE_S < 60 s).
        waiting_since = time.monotonic()
        wait_until(
            lambda: answered_ok(stack.backend_url) >= FIT, f"{FIT} calls answered OK", 45, interval_s=0.2
        )
        waited = time.monotonic() - waiting_since
        time.sleep(SETTLE_S)
        stats = backend_stats(stack.backend_url)
        seen = time.monotonic() - started
        wait_until(
            lambda: read_outcomes(ledger, stack.results_url, ids)["OK"] >= FIT,
            f"{FIT} OK outcomes",
            30,
            interval_s=0.2,
        )
        outcomes = read_outcomes(ledger, stack.results_url, ids)
        print(
            f"\n[ratehdr] {batch} chats, TPM {TPM} ({FIT} calls): backend {stats['by_status']}, "
            f"rate_limited {stats['rate_limited']} ({FIT} answered after {waited:.1f} s, figures at "
            f"{seen:.1f} s); outcomes {dict(outcomes)}"
        )
        for rid in ids:
            usage = ledger.outcomes.get(rid, {}).get("usage")
            assert usage is None or usage["total_tokens"] == CALL_TOKENS, usage
        # The minute's calls were served, none past it; nothing ended any other way than OK.
        assert stats["by_status"].get("200", 0) == FIT, stats
        assert set(outcomes) <= {"OK", "WAITING"}, outcomes
        assert outcomes["OK"] >= FIT, outcomes
        # Over-dispatch is bounded by what could start before the first answer taught the limit
        # (here none: the budget's ten calls fit in the minute), not by the batch: the other
        # requests wait in the queue for the next minute.
        assert stats["rate_limited"] <= max(0, BUDGET - FIT), stats


RPM = 6


def test_a_429_with_retry_after_holds_the_model_instead_of_retrying_into_a_storm(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    batch = 2 * RPM
    with limited_pipeline(kafka_bootstrap, tmp_path, "retryafter", "--rpm", str(RPM)) as stack:
        ledger = Ledger("retryafter")
        answers = asyncio.run(ledger.submit_all(stack.ingest_url, chats("rpm", batch)))
        assert [a.status for a in answers] == [202] * batch
        ids = [a.request_id for a in answers if a.request_id is not None]
        # The minute's requests are answered at once; the rest wait for the next minute (the sim's
        # minute is a fixed 60 s: the test does not wait for it, it watches the wait).
        wait_until(
            lambda: read_outcomes(ledger, stack.results_url, ids)["OK"] >= RPM,
            f"{RPM} OK outcomes",
            30,
            interval_s=0.2,
        )
        answered = backend_stats(stack.backend_url)
        time.sleep(HOLD_WATCH_S)  # a retry before the retry-after would reach the backend meanwhile
        outcomes = read_outcomes(ledger, stack.results_url, ids)
        stats = backend_stats(stack.backend_url)
        print(
            f"\n[retryafter] {batch} chats, RPM {RPM}: outcomes {dict(outcomes)}, "
            f"backend {stats['by_status']}, rate_limited {stats['rate_limited']}, "
            f"calls {stats['total']} (after the first answers {answered['total']})"
        )
        # The minute's requests OK, the rest still waiting for the next minute (no outcome yet: none
        # FAILED or EXPIRED).
        assert outcomes == Counter({"OK": RPM, "WAITING": batch - RPM}), outcomes
        assert stats["by_status"].get("200", 0) == RPM, stats
        # The only 429s are for calls that started before the first answers taught the limit...
        assert stats["rate_limited"] <= BUDGET - RPM, stats
        # ...and the retry-after holds the model: no call reached the backend while it lasts.
        assert stats["total"] == answered["total"], (answered, stats)
