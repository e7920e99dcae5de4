"""Chunks really lost: the broker stops mid-stream for longer than the chunk producer's timeout
(`CHUNK_TIMEOUT_MS`, 2 s), so the chunks written meanwhile are given up (counted, and the next chunk
takes the following seq), while the result is produced until the broker is back. The services as
processes on a broker of the test's own. What a caller of the OpenAI SDK must see: the whole answer,
with no hole and no piece twice (ingest sees the gap and sends the rest from the result), or an
error event the SDK raises; never a hang; and the outcome is stored OK."""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from inferq.messaging.codec import chunk_codec
from inferq.messaging.kafka_config import CHUNK_TIMEOUT_MS
from inferq.messaging.topics import TopicNames
from tests.support.kafka import own_broker, read_all
from tests.support.openai_streams import StreamEvent, stream_into
from tests.support.pipeline import running_pipeline, slow_streams
from tests.support.scrape import metric_sum

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STREAMS = 3
# An analysis takes 28 s: its first token after 8.4 s, then one about every 2 s (the simulated
# answer is about 11 tokens). Each stream outlasts the stop, the outage and the restart: chunks are
# lost in its middle, and more are written after the broker is back (those the caller must not get).
SPEED = 0.1
# Three times the chunk timeout: a chunk written while the broker is down is given up, not late.
OUTAGE_S = 3 * CHUNK_TIMEOUT_MS / 1000


@dataclass
class Callers:
    """What each SDK stream received so far: its text, its completion id, how it ended."""

    events: queue.Queue[StreamEvent] = field(default_factory=queue.Queue)
    text: dict[int, str] = field(default_factory=lambda: dict.fromkeys(range(STREAMS), ""))
    pieces: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(STREAMS), 0))
    ids: dict[int, str] = field(default_factory=dict)
    ended: dict[int, tuple[str, Any]] = field(default_factory=dict)

    def read(self, *, until: float, done: bool) -> None:
        """Take events until monotonic time `until`; with `done`, stop once every stream ended and
        fail when one has not by then (a hang). Each event is awaited, bounded by what is left."""
        while not (done and len(self.ended) == STREAMS):
            left = until - time.monotonic()
            if left <= 0:
                assert not done, (
                    f"streams still open at the deadline: {set(range(STREAMS)) - set(self.ended)}"
                )
                return
            try:
                n, kind, value = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if kind == "text":
                self.ids.setdefault(n, value[0])
                self.text[n] += value[1]
                self.pieces[n] += 1
            else:
                self.ended[n] = (kind, value)


def chunk_seqs(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Each request's chunk seqs on the chunk topic, in the order written (one stream each here: a
    request redone would show seq 0 again)."""
    codec = chunk_codec()
    seqs: dict[str, list[int]] = defaultdict(list)
    for message in read_all(bootstrap, topic):
        value = message.value()
        assert value is not None
        chunk = codec.decode(value)
        seqs[chunk.request_id].append(chunk.seq)
    return seqs


def test_chunks_lost_while_the_broker_is_down_leave_no_hole_in_any_stream(tmp_path: Path) -> None:
    started = time.monotonic()
    with (
        own_broker(tmp_path / "kafka") as broker,
        running_pipeline(
            broker.bootstrap,
            tmp_path / "stack",
            name="chunkloss",
            # The idle bound well above the outage: a stream waits for the broker to come back.
            **slow_streams(speed=SPEED, INFERQ_INGEST_CHAT_STREAM_IDLE_S="120"),
        ) as stack,
    ):
        callers = Callers()
        threads = [
            threading.Thread(target=stream_into, args=(stack.ingest_url, n, callers.events), daemon=True)
            for n in range(STREAMS)
        ]
        for thread in threads:
            thread.start()
        # Every caller has some text, none has its end: then the broker stops.
        deadline = time.monotonic() + 60
        while len(callers.ids) < STREAMS:
            callers.read(until=min(deadline, time.monotonic() + 0.5), done=False)
            assert time.monotonic() < deadline, f"streams without text after 60 s: {callers.ids}"
        assert not callers.ended, callers.ended
        before = dict(callers.pieces)
        stop_began = time.monotonic()
        broker.stop()
        down_at = time.monotonic()
        callers.read(until=down_at + OUTAGE_S, done=False)
        broker.start(timeout_s=60)
        up_at = time.monotonic()
        callers.read(until=up_at + 120, done=True)
        for thread in threads:
            thread.join(10)
        lost = metric_sum(f"{stack.dispatcher_url(0)}/metrics", "inferq_stream_chunks_lost_total")
        outcomes = {
            n: httpx.get(f"{stack.results_url}/v1/requests/{callers.ids[n]}", params={"wait": 30}, timeout=40)
            for n in range(STREAMS)
        }
        seqs = chunk_seqs(broker.bootstrap, TopicNames(stack.topic_prefix).chunks)
    written = {n: seqs.get(callers.ids[n], []) for n in range(STREAMS)}
    holes = {n: sorted(set(range(max(s) + 1)) - set(s)) for n, s in written.items() if s}
    print(
        f"\nbroker stopped in {down_at - stop_began:.1f} s, down {up_at - down_at:.1f} s "
        f"(restart included); {lost:.0f} chunks lost by the dispatcher's count; on the chunk topic, "
        f"each stream's seqs {written}, missing {holes}; pieces each caller read before the stop "
        f"{before}, in all "
        f"{callers.pieces}; endings {[callers.ended[n][0] for n in range(STREAMS)]}; "
        f"test took {time.monotonic() - started:.1f} s"
    )
    # The scenario happened: chunks were given up, and the topic lacks some in a stream's middle.
    assert lost > 0, "no chunk was lost: the outage did not outlast the chunk timeout"
    assert any(holes.values()), f"no seq missing on the chunk topic: {seqs}"
    for n in range(STREAMS):
        assert outcomes[n].status_code == 200, outcomes[n].text
        outcome = outcomes[n].json()
        assert outcome["status"] == "OK", outcome
        kind, value = callers.ended[n]
        if kind == "end":
            assert callers.text[n] == outcome["output"], "a stream that ended normally has a hole or a repeat"
        else:
            # Only an answer that started over otherwise may end a stream in an error: a lost chunk
            # must not (the rest is in the result).
            assert value["code"] == "stream_restarted", value
            assert not outcome["output"].startswith(callers.text[n])
