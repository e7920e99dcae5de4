"""The openai SDK streaming through inferq while the dispatcher serving it is SIGKILLed: the services
as processes on the real broker. The caller never hangs: each stream either ends with the complete
answer (the redo continued what was sent: with the simulated backend, which answers a prompt the
same way twice, that is what happens) or with an error event the SDK raises (the unit tests cover a
redo that diverges); the outcome is stored, OK."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.tools.stack.pipeline import Pipeline
from tests.support.openai_streams import StreamEvent, stream_into
from tests.support.pipeline import running_pipeline, slow_streams

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STREAMS = 3


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Pipeline]:
    # A dispatcher is SIGKILLed: its exit is not a clean one.
    with running_pipeline(
        kafka_bootstrap,
        tmp_path,
        name="ochaos",
        clean_exits=False,
        # The idle bound longer than the takeover (the group notices the dead member, a new one is assigned).
        **slow_streams(INFERQ_INGEST_CHAT_STREAM_IDLE_S="120"),
    ) as pipeline:
        yield pipeline


def test_sdk_streams_survive_a_dispatcher_killed_mid_stream_without_hanging(stack: Pipeline) -> None:
    events: queue.Queue[StreamEvent] = queue.Queue()
    threads = [
        threading.Thread(target=stream_into, args=(stack.ingest_url, n, events), daemon=True)
        for n in range(STREAMS)
    ]
    for thread in threads:
        thread.start()
    text: dict[int, str] = {n: "" for n in range(STREAMS)}
    ids: dict[int, str] = {}
    ended: dict[int, tuple[str, Any]] = {}
    # Not a poll: each event is awaited (events.get, bounded by what is left of the deadline).
    deadline = time.monotonic() + 60
    # Every stream under way (some text received), none finished: then the dispatcher dies.
    while len(ids) < STREAMS:
        n, kind, value = events.get(timeout=max(0.1, deadline - time.monotonic()))
        assert kind == "text", (n, kind, value)
        ids[n] = value[0]
        text[n] += value[1]
    stack.dispatchers[0].kill()
    stack.add_dispatcher()
    stack.wait_dispatcher_assigned(1, 60)
    deadline = time.monotonic() + 150
    while len(ended) < STREAMS:
        n, kind, value = events.get(timeout=max(0.1, deadline - time.monotonic()))
        if kind == "text":
            text[n] += value[1]
        else:
            ended[n] = (kind, value)
    for thread in threads:
        thread.join(10)
    for n in range(STREAMS):
        stored = httpx.get(f"{stack.results_url}/v1/requests/{ids[n]}", params={"wait": 30}, timeout=40)
        assert stored.status_code == 200
        outcome = stored.json()
        assert outcome["status"] == "OK"
        kind, value = ended[n]
        if kind == "end":
            assert text[n] == outcome["output"], "a stream that ended normally carries the whole answer"
        else:
            assert value["code"] == "stream_restarted", value
            assert outcome["output"].startswith(text[n]) is False
