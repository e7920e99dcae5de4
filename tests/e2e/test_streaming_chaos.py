"""A dispatcher SIGKILLed mid-stream, the services as processes on the real broker: the request is
redone by the next owner, whose stream starts again at seq 0 under its own dispatcher id, and the
caller still gets exactly one outcome, whose text is that complete stream's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Message

from inferq.messaging.kafka_config import KafkaSettings
from inferq.tools.stack.pipeline import Pipeline
from tests.support.kafka import a_request, produce_requests, read_all
from tests.support.pipeline import running_pipeline, slow_streams
from tests.support.replies import chunk_topic_of, read_replies
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture
def stack(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Pipeline]:
    # A dispatcher is SIGKILLed: its exit is not a clean one.
    with running_pipeline(
        kafka_bootstrap,
        tmp_path,
        name="schaos",
        clean_exits=False,
        **slow_streams(),
    ) as pipeline:
        yield pipeline


def wait_until_streaming(bootstrap: str, topic: str, request_ids: set[str], timeout_s: float = 30.0) -> None:
    """Until each request has a chunk beside the reply `topic` and none has a result on it: every
    stream is under way."""

    def keys(records: list[Message]) -> set[str]:
        return {(m.key() or b"").decode() for m in records}

    chunks = read_all(
        bootstrap, chunk_topic_of(topic), until=lambda found: keys(found) >= request_ids, timeout_s=timeout_s
    )
    streaming = keys(chunks) & request_ids
    finished = keys(read_all(bootstrap, topic)) & request_ids
    assert streaming == request_ids and not finished, f"streams under way {streaming}, finished {finished}"


def stored_outcome(stack: Pipeline, request_id: str, tenant: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The results service's answer, once it has stored one (open mode: read as the request's tenant)."""
    response = wait_until(
        lambda: httpx.get(
            f"{stack.results_url}/v1/requests/{request_id}", params={"tenant": tenant}, timeout=5
        ),
        f"{request_id}'s outcome stored",
        timeout_s,
        interval_s=0.1,
        done=lambda r: r.status_code == 200,
    )
    answer: dict[str, Any] = response.json()
    return answer


def test_a_dispatcher_killed_mid_stream_leaves_one_outcome_from_a_complete_new_stream(
    stack: Pipeline, kafka_bootstrap: str
) -> None:
    topics = KafkaSettings(bootstrap_servers=kafka_bootstrap, topic_prefix=stack.topic_prefix).topics
    requests = [
        a_request(
            "MEDIUM",
            deadline_ms=120_000,
            stream=True,
            messages=[{"role": "user", "content": f"tell me a long story number {n}"}],
        )
        for n in range(3)
    ]
    produce_requests(kafka_bootstrap, topics.requests_by_name("MEDIUM"), requests)
    ids = {r.request_id for r in requests}
    wait_until_streaming(kafka_bootstrap, topics.results, ids)
    stack.dispatchers[0].kill()
    stack.add_dispatcher()
    stack.wait_dispatcher_assigned(1, 60)

    replies = read_replies(kafka_bootstrap, topics.results, ids, timeout_s=90, settle_s=3.0)

    victim, survivor = f"{stack.topic_prefix}-d0", f"{stack.topic_prefix}-d1"
    for request in requests:
        reply = replies[request.request_id]
        stored = stored_outcome(stack, request.request_id, request.tenant)
        assert stored["status"] == "OK"
        (result,) = reply.results  # the victim wrote none: it died before any stream ended
        assert result.dispatcher_id == survivor
        cut = [c for c in reply.chunks if c.dispatcher_id == victim]
        redone = [c for c in reply.chunks if c.dispatcher_id == survivor]
        assert cut, "the victim had started this stream"
        assert [c.seq for c in cut] == list(range(len(cut)))
        assert [c.seq for c in redone] == list(range(len(redone))), "the redo starts again at seq 0"
        assert {c.attempt for c in reply.chunks} == {1}
        assert "".join(c.delta for c in redone) == result.output == stored["output"]
        assert reply.order[-1] == "result"
        assert len(reply.partitions) == 1
