"""The benches post their trace with `inferq loadgen`'s pacer and HTTP sender: what they record."""

from __future__ import annotations

import asyncio
import functools
import json
import time

import httpx
import pytest

from inferq.messaging.tiers import Tier
from inferq.tools.bench import pipeline_run
from inferq.tools.loadtest.senders import HttpSender
from inferq.tools.traces.arrival import Arrival


def ingest(seen: list[tuple[str, str | None]], request: httpx.Request) -> httpx.Response:
    """202 for tenant b, 429 for tenant a; remembers each body's request id and bearer token."""
    if request.url.path == "/healthz":
        return httpx.Response(200, text="ok")
    body = json.loads(request.content)
    seen.append((body["request_id"], request.headers.get("authorization")))
    if body["tenant"] == "a":
        return httpx.Response(429, json={"error": "tenant a over its share of HIGH"})
    return httpx.Response(202, json={"request_id": body["request_id"], "tier": "HIGH", "expire_at_ms": 1})


def test_a_trace_is_posted_at_its_times_from_the_shared_start_with_each_tenants_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, str | None]] = []
    transport = httpx.MockTransport(functools.partial(ingest, seen))
    monkeypatch.setattr(pipeline_run, "HttpSender", functools.partial(HttpSender, transport=transport))
    trace = [
        Arrival(0, "realtime_chat", Tier.HIGH, index=0, kind="poisson", session_id="s", tenant="b"),
        Arrival(50, "realtime_chat", Tier.HIGH, index=1, kind="poisson", session_id="s", tenant="a"),
    ]
    start_s = time.time() + 0.05
    keys = {"a": "key-a", "b": "key-b"}
    posted = asyncio.run(pipeline_run.submit_trace("http://ingest", trace, "run", start_s, keys))
    subs = sorted(posted, key=lambda s: s.index)
    start_ms = round(start_s * 1000)
    assert [(s.request_id, s.tenant, s.status, s.accepted) for s in subs] == [
        ("run:0", "b", 202, True),
        ("run:1", "a", 429, False),
    ]
    assert [s.due_ms - start_ms for s in subs] == [0, 50]
    assert all(s.sent_ms >= s.due_ms - 5 and s.answered_ms >= s.sent_ms for s in subs)
    assert subs[1].error is not None and "over its share" in subs[1].error  # what refusal_kind reads
    assert sorted(seen) == [("run:0", "Bearer key-b"), ("run:1", "Bearer key-a")]
