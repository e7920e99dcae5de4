"""Preemption in the running dispatcher (every edge a fake): behind a preemptible backend a brief
lent a slot gives it back to a chat that finds none free; the brief waits again as it was and is
answered once, as its first attempt; the backend never runs more calls than the budget; a
non-preemptible backend keeps the ceilings and cancels nothing."""

from __future__ import annotations

import asyncio
from typing import Any

from inferq.dispatcher.backend import Completion
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.preempting import Call, Preemptor
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.schedule import Schedule
from inferq.dispatcher.streaming import ChunkPolicy, ChunkStream
from inferq.dispatcher.work import Work
from inferq.messaging.codec import chunk_codec
from inferq.messaging.records import InferenceRequest, Status, is_chunk
from inferq.messaging.tiers import Tier
from tests.support.dispatcher_fakes import HeldBackend, Rig, encoded, rig, running
from tests.support.kafka import a_request
from tests.support.loop import in_loop
from tests.support.waiting import eventually


async def lend_two_briefs_then_chat(
    r: Rig, briefs: list[InferenceRequest], chat: InferenceRequest, backend: HeldBackend | None = None
) -> None:
    """Budget 2 at peak: the first brief runs within LOW's ceiling of 1, the second is lent the
    other slot, then `chat` comes and finds none free (`backend`: the one the briefs call)."""
    held = backend or r.backend
    for n, brief in enumerate(briefs[:2], start=1):
        r.consumer.produce(r.partition("LOW"), encoded(brief))
        await eventually(lambda n=n: held.in_flight == n, f"brief {n} runs")
    r.consumer.produce(r.partition("HIGH"), encoded(chat))


@in_loop
async def test_a_chat_takes_back_the_slot_lent_to_the_youngest_brief() -> None:
    r = rig(budget=2, schedule_pin="peak", forecast_lending=False, backend_preemptible=True)
    r.backend.hold()
    briefs = [a_request("LOW", messages=[{"role": "user", "content": f"brief {n}"}]) for n in range(2)]
    chat = a_request("HIGH")
    async with running(r):
        # Lent without foresight: the second brief takes the slot past LOW's ceiling of 1.
        await lend_two_briefs_then_chat(r, briefs, chat)
        await eventually(lambda: len(r.backend.calls) == 3 and r.backend.in_flight == 2, "the chat runs")
        started = [messages[0]["content"] for messages, _ in r.backend.calls]
        r.backend.release()
        await eventually(lambda: len(r.results()) == 3, "every answer")
        await eventually(
            lambda: r.consumer.committed_offset(r.partition("LOW")) == 2, "the briefs' offsets committed"
        )
    results = r.results()
    assert {rid: res.status for rid, res in results.items()} == {
        briefs[0].request_id: Status.OK,
        briefs[1].request_id: Status.OK,
        chat.request_id: Status.OK,
    }
    # The youngest brief was cancelled and called again; the older one ran once, undisturbed.
    contents = [messages[0]["content"] for messages, _ in r.backend.calls]
    assert started[:2] == ["brief 0", "brief 1"] and contents.count("brief 1") == 2
    assert contents.count("brief 0") == 1
    # Not a failed attempt: nothing went to the retry topic, and the answer is its first attempt's.
    assert r.producer.on(r.topics.retry) == []
    assert results[briefs[1].request_id].attempts == 1
    # Never two calls in one slot: the cancelled call ended before its token started the chat.
    assert r.backend.most_in_flight == 2


@in_loop
async def test_a_429_while_the_backend_frees_a_cancelled_calls_slot_starts_the_call_again() -> None:
    # The backend frees the cancelled brief's slot when it sees the connection close, a moment after
    # the dispatcher: the chat that took the slot at once is refused (429) in between, once.
    r = rig(budget=2, schedule_pin="peak", forecast_lending=False, backend_preemptible=True, adaptive=True)
    r.backend.hold()
    briefs = [a_request("LOW", messages=[{"role": "user", "content": f"brief {n}"}]) for n in range(2)]
    chat = a_request("HIGH", messages=[{"role": "user", "content": "chat"}])
    held = r.backend.complete
    refused: list[str] = []

    async def not_yet_freed(
        model: str, messages: list[dict[str, str]], params: dict[str, Any], *, timeout_s: float
    ) -> Completion:
        if messages[0]["content"] == "chat" and not refused:
            refused.append("chat")
            raise BackendError("backend answered 429", retriable=True, status=429)
        return await held(model, messages, params, timeout_s=timeout_s)

    r.backend.complete = not_yet_freed  # type: ignore[method-assign]
    async with running(r):
        await lend_two_briefs_then_chat(r, briefs, chat)
        await eventually(
            lambda: [m[0]["content"] for m, _ in r.backend.calls].count("chat") == 1, "the chat runs"
        )
        r.backend.release()
        await eventually(lambda: len(r.results()) == 3, "every answer")
        budget = r.dispatcher.health()["effective_budget"]
    results = r.results()
    assert refused == ["chat"]
    assert results[chat.request_id].status is Status.OK
    assert results[chat.request_id].attempts == 1  # started again, not retried: no backoff
    assert r.producer.on(r.topics.retry) == []
    assert budget == 2, "a slot not yet freed is not the backend's overload"


@in_loop
async def test_an_analysis_lent_the_headroom_within_its_ceiling_gives_it_back_to_a_chat() -> None:
    # Budget 4 at peak: MEDIUM's ceiling 3, LOW's 1, HIGH's headroom 1. A brief, then three analyses:
    # the third is within MEDIUM's ceiling but takes the headroom, so it is lent, and a chat takes
    # it back (counted past the ceilings, nothing would be: the chat would wait).
    r = rig(budget=4, schedule_pin="peak", forecast_lending=False, backend_preemptible=True)
    r.backend.hold()
    brief = a_request("LOW", messages=[{"role": "user", "content": "brief"}])
    analyses = [
        a_request("MEDIUM", messages=[{"role": "user", "content": f"analysis {n}"}]) for n in range(3)
    ]
    chat = a_request("HIGH", messages=[{"role": "user", "content": "chat"}])
    async with running(r):
        r.consumer.produce(r.partition("LOW"), encoded(brief))
        await eventually(lambda: r.backend.in_flight == 1, "the brief runs")
        for n, analysis in enumerate(analyses, start=2):
            r.consumer.produce(r.partition("MEDIUM"), encoded(analysis))
            await eventually(
                lambda n=n: r.backend.in_flight == len(r.backend.calls) == n, "the analysis runs"
            )
        r.consumer.produce(r.partition("HIGH"), encoded(chat))
        await eventually(lambda: r.backend.in_flight == 4 and len(r.backend.calls) == 5, "the chat runs")
        r.backend.release()
        await eventually(lambda: len(r.results()) == 5, "every answer")
    contents = [messages[0]["content"] for messages, _ in r.backend.calls]
    assert contents.count("analysis 2") == 2 and contents.count("brief") == 1
    assert {res.status for res in r.results().values()} == {Status.OK}
    assert r.results()[analyses[2].request_id].attempts == 1
    assert r.backend.most_in_flight == 4


@in_loop
async def test_without_a_preemptible_backend_the_chat_waits_and_the_ceiling_holds() -> None:
    r = rig(budget=2, schedule_pin="peak", forecast_lending=False)
    r.backend.hold()
    briefs = [a_request("LOW", messages=[{"role": "user", "content": f"brief {n}"}]) for n in range(2)]
    chat = a_request("HIGH")
    async with running(r):
        for brief in briefs:
            r.consumer.produce(r.partition("LOW"), encoded(brief))
        await eventually(lambda: r.backend.in_flight == 1, "one brief runs")
        r.consumer.produce(r.partition("HIGH"), encoded(chat))
        await eventually(lambda: r.backend.in_flight == 2, "the chat runs beside it")
        r.backend.release()
        await eventually(lambda: len(r.results()) == 3, "every answer")
    assert len(r.backend.calls) == 3


def a_work(offsets: PartitionOffsets, offset: int) -> Work:
    return Work(a_request("LOW"), Tier.LOW, offsets, offset)


def test_a_request_waiting_again_is_not_committed_past_nor_adopted_as_running() -> None:
    offsets = PartitionOffsets("unit-low", 0)
    works = [a_work(offsets, o) for o in (0, 1, 2)]
    for work in works:
        offsets.track(work.offset)
        work.begin()
    works[0].done()
    works[2].done()
    works[1].wait_again()
    assert offsets.committable() == 1
    assert works[1].preemptions == 1
    offsets.revoked = True
    again = PartitionOffsets("unit-low", 0)
    again.adopt(offsets)
    assert not again.handled_already(1)  # redone by the next assignment, not taken for running
    assert again.handled_already(2)


class _Metrics:
    def __init__(self) -> None:
        self.preempted: list[tuple[Tier, int, bool, bool]] = []

    def record_preempted(self, tier: Tier, tokens: int, *, streamed: bool, limit_reached: bool) -> None:
        self.preempted.append((tier, tokens, streamed, limit_reached))


def a_preemptor(metrics: _Metrics, now: list[int]) -> Preemptor:
    return Preemptor(
        preemptible=frozenset({"default"}),
        max_preemptions=1,
        readahead=ReadAhead(promotion_age_ms=10**9),
        metrics=metrics,  # type: ignore[arg-type]
        clock_ms=lambda: now[0],
        typical_ms=lambda tier: 1000.0,
        estimate=lambda work: 400,
    )


@in_loop
async def test_a_call_whose_answer_arrived_or_that_streamed_a_chunk_is_not_taken_back() -> None:
    metrics, now = _Metrics(), [0]
    preemptor = a_preemptor(metrics, now)
    offsets = PartitionOffsets("unit-low", 0)
    answered: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done = asyncio.ensure_future(answered)
    answered.set_result(None)
    await asyncio.sleep(0)
    call = preemptor.running(a_work(offsets, 0), Tier.LOW, "default", done, None)  # type: ignore[arg-type]
    assert not preemptor.cancel(call)  # the answer is in: its outcome is written, once

    async def sink(seq: int, delta: object) -> None:
        return None

    stream = ChunkStream(sink, ChunkPolicy())  # type: ignore[arg-type]
    stream.started = True
    hanging = asyncio.ensure_future(asyncio.Event().wait())
    streamed = preemptor.running(a_work(offsets, 1), Tier.LOW, "default", hanging, stream)  # type: ignore[arg-type]
    assert not preemptor.cancel(streamed) and not hanging.cancelled()
    hanging.cancel()


@in_loop
async def test_the_cost_is_counted_and_the_limit_reported_once() -> None:
    metrics, now = _Metrics(), [0]
    preemptor = a_preemptor(metrics, now)
    offsets = PartitionOffsets("unit-low", 0)
    offsets.track(0)
    work = a_work(offsets, 0)
    hanging = asyncio.ensure_future(asyncio.Event().wait())
    call: Call = preemptor.running(work, Tier.LOW, "default", hanging, None)  # type: ignore[arg-type]
    now[0] = 250
    assert preemptor.cancel(call)
    assert not preemptor.cancel(call)  # one cancellation per call
    await asyncio.sleep(0)
    assert hanging.cancelled()
    preemptor.ended(call)
    preemptor.wait_again(call)
    # Not streamed: a quarter of its tier's typical time x its 400-token estimate; limit 1 reached.
    assert metrics.preempted == [(Tier.LOW, 100, False, True)]


@in_loop
async def test_a_streamed_brief_with_no_chunk_out_is_taken_back_and_its_caller_sees_each_chunk_once() -> None:
    r = rig(budget=2, schedule_pin="peak", forecast_lending=False, backend_preemptible=True)
    r.backend.hold()
    r.backend.pieces = ["a", "b", "c"]
    briefs = [
        a_request("LOW", stream=True, messages=[{"role": "user", "content": f"b{n}"}]) for n in range(2)
    ]
    chat = a_request("HIGH")
    async with running(r):
        await lend_two_briefs_then_chat(r, briefs, chat)
        await eventually(lambda: len(r.backend.calls) == 3, "the chat runs")
        r.backend.release()
        await eventually(lambda: len(r.results()) == 3, "every answer")
    codec = chunk_codec()
    chunks = [
        codec.decode(p.value) for p in r.producer.on(r.topics.chunks) if is_chunk(list(p.headers.items()))
    ]
    preempted = [(c.attempt, c.seq) for c in chunks if c.request_id == briefs[1].request_id]
    assert len(preempted) == len(set(preempted)) and preempted, preempted  # no chunk twice
    assert {attempt for attempt, _ in preempted} == {1}
    assert r.results()[briefs[1].request_id].status is Status.OK
    assert [messages[0]["content"] for messages, _ in r.backend.calls].count("b1") == 2  # taken back once


class StubbornBackend(HeldBackend):
    """Answers a call even when it is cancelled while held: the answer and the cancel cross."""

    async def complete(
        self, model: str, messages: list[dict[str, str]], params: dict[str, Any], *, timeout_s: float
    ) -> Completion:
        try:
            return await super().complete(model, messages, params, timeout_s=timeout_s)
        except asyncio.CancelledError:
            return Completion(
                output="late", model=model, prompt_tokens=1, completion_tokens=1, total_tokens=2
            )


@in_loop
async def test_an_answer_that_crosses_the_cancel_is_the_one_outcome() -> None:
    backend = StubbornBackend()  # the default backend (r.backend is left unused)
    r = rig(
        budget=2,
        schedule_pin="peak",
        forecast_lending=False,
        backend_preemptible=True,
        spares={"default": backend},
    )
    backend.hold()
    briefs = [a_request("LOW", messages=[{"role": "user", "content": f"brief {n}"}]) for n in range(2)]
    chat = a_request("HIGH")
    async with running(r):
        await lend_two_briefs_then_chat(r, briefs, chat, backend)
        await eventually(lambda: briefs[1].request_id in r.results(), "the cancelled brief's late answer")
        backend.release()
        await eventually(lambda: len(r.results()) == 3, "every answer")
    assert r.results()[briefs[1].request_id].output == "late"
    contents = [messages[0]["content"] for messages, _ in backend.calls]
    assert contents.count("brief 1") == 1  # answered, so not called again
    results_of_brief = [p for p in r.producer.on(r.topics.results) if not is_chunk(list(p.headers.items()))]
    assert len(results_of_brief) == 3


def test_a_request_put_back_waits_ahead_of_the_newer_ones_of_its_tier_with_its_deadline() -> None:
    readahead = ReadAhead(promotion_age_ms=10**9)
    offsets = PartitionOffsets("unit-low", 0)
    works = []
    for n in range(3):
        request = a_request("LOW", created_at_ms=1_000 + n, expire_at_ms=60_000 + n)
        works.append(Work(request, Tier.LOW, offsets, n))
        readahead.add(works[-1])
    first, second = readahead.pop(Tier.LOW), readahead.pop(Tier.LOW)
    assert (first, second) == (works[0], works[1])
    readahead.put_back(works[1])
    readahead.put_back(works[0])
    assert readahead.held(Tier.LOW) == 3
    again = [readahead.pop(Tier.LOW) for _ in range(3)]
    assert again == works
    assert [(w.created_at_ms, w.expire_at_ms) for w in again] == [
        (1_000, 60_000),
        (1_001, 60_001),
        (1_002, 60_002),
    ]


@in_loop
async def test_a_brief_at_the_preemption_limit_waits_within_its_share_while_a_fresh_one_borrows() -> None:
    r = rig(
        budget=2,
        schedule_pin="peak",
        forecast_lending=False,
        backend_preemptible=True,
        max_preemptions=1,
        tenant_headroom_slots=0,  # two tenants: no slot kept for the other's chats
    )
    r.backend.hold("inferq-cheap")  # briefs hang; the chat answers at once
    briefs = [a_request("LOW", messages=[{"role": "user", "content": f"brief {n}"}]) for n in range(2)]
    # Another tenant's: a tenant's newer requests wait behind its request at the limit (its order).
    briefs.append(a_request("LOW", tenant="other", messages=[{"role": "user", "content": "brief 2"}]))
    async with running(r):
        chat = a_request("HIGH")
        await lend_two_briefs_then_chat(r, briefs, chat)
        await eventually(lambda: chat.request_id in r.results(), "the chat's answer")
        # Brief 1, preempted once (the limit), is lent no slot past LOW's ceiling (brief 0 holds it);
        # a newer brief of another tenant, never preempted, borrows the free slot instead.
        r.consumer.produce(r.partition("LOW"), encoded(briefs[2]))
        await eventually(lambda: r.backend.in_flight == 2, "the newer brief borrows the slot")
        contents = [messages[0]["content"] for messages, _ in r.backend.calls]
        r.backend.release()
        await eventually(lambda: len(r.results()) == 4, "every answer")
    assert contents[3:] == ["brief 2"], contents
    assert [messages[0]["content"] for messages, _ in r.backend.calls].count("brief 1") == 2


@in_loop
async def test_no_call_is_cancelled_for_a_slot_its_own_tier_would_take_again() -> None:
    metrics, now = _Metrics(), [0]
    preemptor = a_preemptor(metrics, now)
    window = Schedule.default(2).pin("peak").window_at(None)  # type: ignore[arg-type]
    offsets = PartitionOffsets("unit-low", 0)
    tasks = [asyncio.ensure_future(asyncio.Event().wait()) for _ in range(2)]
    for n, task in enumerate(tasks):
        now[0] = n
        preemptor.running(a_work(offsets, n), Tier.LOW, "default", task, None)
    asked = {"in_use": {Tier.LOW: 2}, "waiting": {Tier.MEDIUM: 1}, "window": window, "budget": 2}
    # The scheduler would give the freed slot back to LOW (say MEDIUM may not take the headroom).
    assert not preemptor.preempt(**asked, next_tier=lambda in_use, waiting, lent: Tier.LOW)  # type: ignore[arg-type]
    assert not any(t.cancelled() for t in tasks)
    seen: list[tuple[dict[Tier, int], dict[Tier, int]]] = []

    def to_medium(in_use: dict[Tier, int], waiting: dict[Tier, int], lent: dict[Tier, int]) -> Tier:
        seen.append((in_use, waiting))
        return Tier.MEDIUM

    assert preemptor.preempt(**asked, next_tier=to_medium)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    assert [t.cancelled() for t in tasks] == [False, True]  # the youngest
    # Asked with the victim's slot free and its request waiting again.
    assert seen[0][0][Tier.LOW] == 1 and seen[0][1][Tier.LOW] == 1
    tasks[0].cancel()
