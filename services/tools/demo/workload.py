"""A small mixed workload sent through HTTP ingest, and the wait for every outcome."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

TERMINAL = {"OK", "EXPIRED", "EVICTED", "REJECTED", "FAILED"}


@dataclass(frozen=True)
class Submission:
    scenario: str
    text: str
    session_id: str


def evening_mix() -> list[Submission]:
    """A dump of morning briefs, then chat and emotion analysis arriving together, as at 20:00."""
    items = [
        Submission("morning_brief", f"Brief for user {i}: weather, calendar, mood", f"brief-{i}")
        for i in range(6)
    ]
    for i in range(10):
        items.append(
            Submission("realtime_chat", f"Hi, it's me again ({i}). How was your day?", f"chat-{i % 4}")
        )
        if i % 2 == 0:
            items.append(Submission("emotion_analysis", f"Diary {i}: tired but hopeful today.", f"diary-{i}"))
    items.append(Submission("recipe_recommend", "Something warm with what is left in the fridge", "recipe-1"))
    return items


async def submit_all(ingest_url: str, items: list[Submission]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=ingest_url, timeout=10.0) as client:

        async def one(item: Submission) -> dict[str, Any]:
            body = {
                "scenario": item.scenario,
                "session_id": item.session_id,
                "messages": [{"role": "user", "content": item.text}],
            }
            response = await client.post("/v1/requests", json=body)
            if response.status_code != 202:
                raise RuntimeError(f"ingest refused {item.scenario}: {response.status_code} {response.text}")
            answer: dict[str, Any] = response.json() | {"scenario": item.scenario}
            return answer

        return list(await asyncio.gather(*(one(i) for i in items)))


async def wait_outcomes(
    results_url: str, request_ids: list[str], timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Poll the results API until every id has a terminal outcome or `timeout_s` passes."""
    found: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=results_url, timeout=5.0) as client:
        while len(found) < len(request_ids) and time.monotonic() < deadline:
            for rid in request_ids:
                if rid in found:
                    continue
                response = await client.get(f"/v1/requests/{rid}")
                if response.status_code == 200 and response.json()["status"] in TERMINAL:
                    found[rid] = response.json()
            if len(found) < len(request_ids):
                await asyncio.sleep(0.2)
    return found


def format_table(accepted: list[dict[str, Any]], outcomes: dict[str, dict[str, Any]]) -> str:
    def secs(ms: int | None) -> str:
        return "-" if ms is None else f"{ms / 1000:.3f}"

    header = f"{'request_id':36}  {'scenario':17} {'tier':6} {'status':8}"
    lines = [f"{header} {'wait s':>7} {'infer s':>8} {'e2e s':>7}"]
    for a in accepted:
        o = outcomes.get(a["request_id"])
        if o is None:
            lines.append(f"{a['request_id']:36}  {a['scenario']:17} {a['tier']:6} {'MISSING':8}")
            continue
        t = o["timings"]
        lines.append(
            f"{a['request_id']:36}  {a['scenario']:17} {o['tier']:6} {o['status']:8} "
            f"{secs(t['queue_wait_ms']):>7} {secs(t['inference_ms']):>8} {secs(t['end_to_end_ms']):>7}"
        )
    return "\n".join(lines)
