"""The HTTP face of the simulator: an OpenAI-compatible chat-completions endpoint plus stats and admin.

Endpoints:
    POST /v1/chat/completions   OpenAI chat completions (401, 400, 429, 500, 503 as a real provider answers;
                                with --rpm/--tpm, 429 past a per-minute limit and x-ratelimit-* headers
                                on every answer, ``rate_limits.py``);
                                with `stream: true`, `chat.completion.chunk` events ending `data: [DONE]`
                                (`streaming.py`), some dropped mid-stream with `stream_drop_rate`
    POST /v1/embeddings         OpenAI embeddings: deterministic vectors of the text (`embeddings.py`),
                                with the same latency model, faults and rate limits as a completion
    GET  /stats                 counters, concurrency, current faults, and the calls whose client hung up
                                (`abandoned`, `abandoned_tokens`; `on_hangup` says what became of them,
                                ``hangup.py``)
    GET  /timings               per marked call, when it was received, streamed its first token and
                                finished (`timings.py`, for the delivery benchmark), and how many
                                times each marker was answered in full (`served`)
    GET  /received/{marker}     the last marked call's request body without its messages (404: none)
    GET  /healthz               liveness
    POST /admin/faults          switch outage, error_rate, degradation, stream_drop_rate at runtime;
                                returns the fault state
    POST /admin/reset           zero the counters and forget the timings; returns the fresh stats

A call whose client hangs up runs on and holds its slot to its natural end (`on_hangup` keep, as a
hosted API), or stops and frees it at once (free, as vLLM or TGI do): ``hangup.py``.

The API key, when set, guards only `/v1/*`: it simulates the provider's auth for the dispatcher to exercise,
it is not a security boundary (the CLI binds to 127.0.0.1 by default).
"""

from __future__ import annotations

import asyncio
import hmac
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from inferq.tools.simbackend.backend import Rejected, SimBackend
from inferq.tools.simbackend.choices import completion
from inferq.tools.simbackend.embeddings import EmbeddingRequest, embedding_response
from inferq.tools.simbackend.hangup import ClientGoneError, Generations, Progress, StreamedCall
from inferq.tools.simbackend.latency_model import LatencyModel
from inferq.tools.simbackend.protocol import (
    OUTAGE,
    SERVER_ERROR,
    UNAUTHORIZED,
    UNAVAILABLE,
    ApiError,
    ChatCompletionRequest,
    FaultUpdate,
    answer,
    minute_limit_reached,
    parse,
    rate_limited,
)
from inferq.tools.simbackend.rate_limits import MinuteLimits
from inferq.tools.simbackend.settings import SimBackendSettings
from inferq.tools.simbackend.state import FaultState
from inferq.tools.simbackend.streaming import StreamDroppedError, StreamPlan, sse_events
from inferq.tools.simbackend.timings import CallTiming, CallTimings

Sleep = Callable[[float], Awaitable[None]]
# The status of an answer nobody reads: its client hung up (nginx's "client closed request").
CLIENT_CLOSED = 499


def create_app(
    settings: SimBackendSettings, *, sleep: Sleep = asyncio.sleep, clock: Callable[[], float] = time.monotonic
) -> Starlette:
    """Build the simulator. Tests inject `sleep` to observe latencies and hold calls open without waiting,
    and `clock` (seconds) to say how far a sync call had got when its client hung up."""
    backend = SimBackend(
        limit=settings.limit,
        latency=LatencyModel.from_settings(settings),
        faults=FaultState(error_rate=settings.error_rate, stream_drop_rate=settings.stream_drop_rate),
        rng=random.Random(settings.seed),
    )
    retry_after = {"Retry-After": str(settings.retry_after_s)}
    timings = CallTimings()
    generations = Generations(on_hangup=settings.on_hangup, stats=backend.stats, release=backend.release)
    minutes: dict[str, MinuteLimits] = {}

    def minute_of(model: str) -> MinuteLimits:
        if model not in minutes:
            minutes[model] = MinuteLimits(rpm=settings.rpm, tpm=settings.tpm)
        return minutes[model]

    def answer_error(error: ApiError, model: str | None) -> Response:
        backend.stats.record(error.status, model)
        return error_response(error)

    def error_response(error: ApiError) -> Response:
        # Clients honour Retry-After on 429 and 503 only; elsewhere it would be noise.
        headers = retry_after if error.status in (429, 503) else None
        return JSONResponse(error.body(), status_code=error.status, headers=headers)

    def over_minute_limits(minute: MinuteLimits, model: str, tokens: int) -> Response | None:
        """The 429 of a call past its model's per-minute requests or tokens, or None."""
        refusal = minute.refusal(tokens) if minute.enabled else None
        if refusal is None:
            return None
        wait_s = minute.retry_after_s(tokens)
        error = minute_limit_reached(refusal, minute.rpm if refusal == "requests" else minute.tpm, wait_s)
        backend.stats.record(429, model)
        backend.stats.rate_limited += 1
        headers = {**minute.headers(), "retry-after": str(wait_s)}
        return JSONResponse(error.body(), status_code=429, headers=headers)

    async def hold(
        latency_s: float, tokens: int, request: Request, *, status: int, model: str, timing: CallTiming | None
    ) -> None:
        """Run a sync call's generation (`tokens` over `latency_s`) until it ends. When its client
        hangs up first (ClientGoneError, or CancelledError in process), the call is abandoned with
        the share of its tokens generated by then."""

        async def generation() -> None:
            await sleep(latency_s)
            # Counted as answered when it ends, its client there or not (with `keep`), as a hosted API
            # bills it; a `free` hang-up cancels it before.
            backend.stats.record(status, model)
            backend.stats.completed_tokens += tokens
            timings.done(timing)

        started_s = clock()
        task = generations.start(generation())
        try:
            await generations.wait(task, request.receive)
        except (ClientGoneError, asyncio.CancelledError):
            share = min(1.0, (clock() - started_s) / latency_s) if latency_s > 0 else 1.0
            generations.hung_up(task, int(tokens * share))
            raise

    def rejected(decision: Rejected, model: str) -> Response:
        """The answer of a call the concurrency limit or an outage turned away."""
        if decision.reason == "outage":
            return answer_error(OUTAGE, model)
        return answer_error(rate_limited(settings.limit, settings.retry_after_s), model)

    async def chat_completions(request: Request) -> Response:
        if not _authorized(request, settings.api_key):
            return answer_error(UNAUTHORIZED, None)
        parsed = parse(ChatCompletionRequest, await request.body())
        if isinstance(parsed, ApiError):
            return answer_error(parsed, None)
        model = parsed.model
        timing = timings.received(
            parsed.model_dump(include={"messages"}), lambda: parsed.model_dump(exclude_unset=True)
        )
        reply = answer(parsed)
        # Each of the `n` choices is a whole answer (`choices.py`), as a provider counts them.
        tokens = reply.prompt_tokens + reply.completion_tokens * parsed.n
        minute = minute_of(model)
        refused = over_minute_limits(minute, model, tokens)
        if refused is not None:
            return refused
        decision = backend.admit(model, stream=parsed.stream)
        if isinstance(decision, Rejected):
            return rejected(decision, model)
        if minute.enabled:
            minute.count(tokens)
        counted = minute.headers()
        if parsed.stream and decision.status == 200:
            return streamed(
                parsed, decision.latency_s, drop=decision.drops_stream, timing=timing, rate=counted
            )
        answered = reply.completion_tokens * parsed.n if decision.status == 200 else 0
        try:
            await hold(
                decision.latency_s, answered, request, status=decision.status, model=model, timing=timing
            )
        except ClientGoneError:
            return Response(status_code=CLIENT_CLOSED)
        if decision.status == 500:
            return error_response(SERVER_ERROR)
        if decision.status == 503:
            return error_response(UNAVAILABLE)
        body = completion(parsed, completion_id=f"chatcmpl-{uuid.uuid4().hex}", created_s=int(time.time()))
        return JSONResponse(body, headers=counted)

    async def embeddings(request: Request) -> Response:
        if not _authorized(request, settings.api_key):
            return answer_error(UNAUTHORIZED, None)
        parsed = parse(EmbeddingRequest, await request.body())
        if isinstance(parsed, ApiError):
            return answer_error(parsed, None)
        model, tokens = parsed.model, parsed.prompt_tokens()
        minute = minute_of(model)
        refused = over_minute_limits(minute, model, tokens)
        if refused is not None:
            return refused
        decision = backend.admit(model)
        if isinstance(decision, Rejected):
            return rejected(decision, model)
        if minute.enabled:
            minute.count(tokens)
        try:
            await hold(decision.latency_s, 0, request, status=decision.status, model=model, timing=None)
        except ClientGoneError:
            return Response(status_code=CLIENT_CLOSED)
        if decision.status != 200:
            return error_response(SERVER_ERROR if decision.status == 500 else UNAVAILABLE)
        return JSONResponse(embedding_response(parsed), headers=minute.headers())

    def streamed(
        parsed: ChatCompletionRequest,
        latency_s: float,
        *,
        drop: bool,
        timing: CallTiming | None,
        rate: dict[str, str],
    ) -> Response:
        """The answer as server-sent events, generated apart from their sending (``hangup.py``): the slot
        is held until the last event is generated (or the drop, or with `free` the client's hang-up)."""
        backend.stats.record(200, parsed.model)
        plan = StreamPlan(latency_s, settings.stream_first_token_share, drop=drop)
        progress = Progress()
        events = sse_events(
            [answer(parsed, choice=i) for i in range(parsed.n)],
            plan,
            model=parsed.model,
            completion_id=f"chatcmpl-{uuid.uuid4().hex}",
            created_s=int(time.time()),
            include_usage=bool(parsed.stream_options and parsed.stream_options.include_usage),
            sleep=sleep,
            top_logprobs=(parsed.top_logprobs or 0) if parsed.logprobs else None,
            progress=progress,
        )
        # Unbounded, as a server's output buffer: the model's pace is its own, not the reader's.
        generated: asyncio.Queue[bytes | StreamDroppedError | None] = asyncio.Queue()

        async def generate() -> None:
            try:
                async for chunk in events:
                    generated.put_nowait(chunk)
            except StreamDroppedError as exc:
                generated.put_nowait(exc)
                return
            backend.stats.completed_tokens += progress.tokens
            generated.put_nowait(None)

        task = generations.start(generate())

        async def body() -> AsyncIterator[bytes]:
            index = 0
            while (chunk := await generated.get()) is not None:
                if isinstance(chunk, StreamDroppedError):
                    backend.stats.streams_dropped += 1
                    raise chunk
                if index == 1:  # the first token's chunk (the first only names the role)
                    timings.first_token(timing)
                index += 1
                yield chunk
            timings.done(timing)

        no_cache = {"cache-control": "no-cache", **rate}
        return StreamedCall(body(), headers=no_cache, then=lambda: generations.hung_up(task, progress.tokens))

    def snapshot() -> dict[str, object]:
        return {**backend.snapshot(), "on_hangup": settings.on_hangup.value}

    async def stats(_: Request) -> Response:
        return JSONResponse(snapshot())

    async def get_timings(_: Request) -> Response:
        return JSONResponse({"timings": timings.as_dict(), "served": timings.served})

    async def get_received(request: Request) -> Response:
        body = timings.bodies.get(request.path_params["marker"])
        return JSONResponse(body) if body is not None else JSONResponse({"error": "no such call"}, 404)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def set_faults(request: Request) -> Response:
        update = parse(FaultUpdate, await request.body())
        if isinstance(update, ApiError):
            return JSONResponse(update.body(), status_code=update.status)
        faults = backend.faults
        if update.outage is not None:
            faults.outage = update.outage
        if update.error_rate is not None:
            faults.error_rate = update.error_rate
        if update.degradation is not None:
            faults.degradation = update.degradation
        if update.stream_drop_rate is not None:
            faults.stream_drop_rate = update.stream_drop_rate
        return JSONResponse(faults.as_dict())

    async def reset(_: Request) -> Response:
        backend.stats.reset()
        timings.reset()
        return JSONResponse(snapshot())

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/stats", stats, methods=["GET"]),
            Route("/timings", get_timings, methods=["GET"]),
            Route("/received/{marker}", get_received, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/admin/faults", set_faults, methods=["POST"]),
            Route("/admin/reset", reset, methods=["POST"]),
        ]
    )


def _authorized(request: Request, api_key: SecretStr | None) -> bool:
    if api_key is None:
        return True
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    # Constant-time, like a real provider's check: the key must not leak through response timing.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), api_key.get_secret_value().encode()
    )
