"""The dispatcher (built by the real `bootstrap`, every edge a fake) serving embedding requests as it
serves chat: the backend's `embed` called with the texts and the dimensions, its vectors in the OK
result; a failure retried or failed by the same policy; a hostile record dead-lettered and answered
FAILED; an expired one answered EXPIRED without a call."""

from __future__ import annotations

from dataclasses import replace

from inferq.dispatcher.errors import BackendError
from inferq.messaging import limits
from inferq.messaging.records import InferenceRequest, Status
from tests.support.dispatcher_fakes import encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually

TEXTS = ("likes green tea", "walks the dog")


def an_embedding(tier: str = "LOW", **overrides: object) -> InferenceRequest:
    request = a_request(tier, messages=[], scenario="memory_embedding", model="emb")
    fields: dict[str, object] = {"embedding_input": TEXTS, "embedding_dimensions": 3} | overrides
    return replace(request, **fields)  # type: ignore[arg-type]


@in_loop
async def test_an_embedding_is_called_with_its_texts_and_its_vectors_are_the_result() -> None:
    request = an_embedding()
    async with running(rig()) as r:
        r.consumer.produce(r.partition("LOW"), encoded(request))
        await eventually(lambda: request.request_id in r.results(), "the outcome")
        result = r.results()[request.request_id]
        assert result.status is Status.OK and result.output is None
        assert result.embeddings == ((15.0, 16.0, 17.0), (13.0, 14.0, 15.0))  # the fake's vectors
        assert r.backend.models == ["emb"]
        assert r.backend.calls[0][0] == [{"role": "user", "content": t} for t in TEXTS]


@in_loop
async def test_a_failed_embedding_is_failed_and_dead_lettered_like_a_chat_call() -> None:
    request = an_embedding("HIGH")
    async with running(rig()) as r:
        r.backend.failure = BackendError(
            "backend answered unusable vectors (embeddings: ...)", retriable=False
        )
        r.consumer.produce(r.partition("HIGH"), encoded(request))
        await eventually(lambda: request.request_id in r.results(), "the outcome")
        assert r.results()[request.request_id].status is Status.FAILED
        assert r.results()[request.request_id].embeddings is None
        assert len(r.dead_letters()) == 1


@in_loop
async def test_a_hostile_embedding_record_is_dead_lettered_and_never_called() -> None:
    too_many = an_embedding(
        embedding_input=("x",) * (limits.MAX_EMBEDDING_INPUTS + 1), embedding_dimensions=1
    )
    with_messages = replace(an_embedding(), messages=a_request().messages)
    expired = an_embedding(expire_at_ms=an_embedding().created_at_ms - 1)
    async with running(rig()) as r:
        low = r.partition("LOW")
        for request in (too_many, with_messages, expired):
            r.consumer.produce(low, encoded(request))
        await eventually(lambda: len(r.results()) == 3, "three outcomes")
        statuses = {rid: result.status for rid, result in r.results().items()}
        assert statuses[too_many.request_id] is Status.FAILED
        assert statuses[with_messages.request_id] is Status.FAILED
        assert statuses[expired.request_id] is Status.EXPIRED
        assert r.backend.models == []
        assert len(r.dead_letters()) == 2
