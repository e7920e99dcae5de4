"""A recording LLM backend for `inferq bench latency`: OpenAI chat-completions, arrival time per request.

The simulated backend keeps counters, not per-request times, and the request_id never reaches the
backend (the dispatcher forwards only the model and the messages). So the latency bench puts a
marker, `inferq-bench:<request_id>`, at the start of the user message, and this backend stamps
`time.time_ns()` the moment its handler starts (after uvicorn has parsed the request: what a real
provider would call "received") and keeps the first stamp per marker. Every call answers after a
fixed, small latency, with no concurrency limit: the bench measures the pipeline, not this.

Endpoints: `POST /v1/chat/completions`, `GET /arrivals` (marker → epoch ns), `GET /stats` (also the
number of client connections seen), `GET /healthz`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

MARKER_PREFIX = "inferq-bench:"


def marked_content(request_id: str) -> str:
    """The user message that carries `request_id` to the backend."""
    return f"{MARKER_PREFIX}{request_id} Hi, how was your day?"


def marker_of(content: object) -> str | None:
    """The request_id a message content carries, or None for content without a marker."""
    if not isinstance(content, str) or not content.startswith(MARKER_PREFIX):
        return None
    request_id = content[len(MARKER_PREFIX) :].split(" ", 1)[0]
    return request_id or None


def find_marker(body: object) -> str | None:
    """The marker of the first message that has one, in a chat-completions body (any shape)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return None
    for message in messages:
        found = marker_of(message.get("content")) if isinstance(message, dict) else None
        if found is not None:
            return found
    return None


def create_app(latency_s: float, *, clock_ns: Callable[[], int] = time.time_ns) -> Starlette:
    arrivals: dict[str, int] = {}
    counts = {"calls": 0, "unmarked": 0, "repeated": 0}
    # The dispatcher's HTTP client pools connections; how many it opened says how big its pool grew.
    connections: set[tuple[str, int]] = set()

    async def chat_completions(request: Request) -> Response:
        arrived_ns = clock_ns()  # first thing: the body read and parse below are the backend's own time
        counts["calls"] += 1
        if request.client is not None:
            connections.add((request.client.host, request.client.port))
        try:
            body = json.loads(await request.body())
        except ValueError:
            return JSONResponse({"error": {"message": "body is not JSON"}}, status_code=400)
        marker = find_marker(body)
        if marker is None:
            counts["unmarked"] += 1
        elif marker in arrivals:
            counts["repeated"] += 1  # a retry or a redo: the first arrival is the one measured
        else:
            arrivals[marker] = arrived_ns
        if latency_s > 0:
            await asyncio.sleep(latency_s)
        model = str(body.get("model", "unknown")) if isinstance(body, dict) else "unknown"
        return JSONResponse(
            {
                "id": f"chatcmpl-{counts['calls']}",
                "object": "chat.completion",
                "created": arrived_ns // 1_000_000_000,
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
            }
        )

    async def get_arrivals(_: Request) -> Response:
        return JSONResponse({"arrivals": arrivals, "connections": len(connections), **counts})

    async def stats(_: Request) -> Response:
        return JSONResponse({"marked": len(arrivals), "connections": len(connections), **counts})

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/arrivals", get_arrivals, methods=["GET"]),
            Route("/stats", stats, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ]
    )


def serve(host: str, port: int, latency_s: float) -> int:
    """Serve until SIGTERM (the entry point of `inferq bench recorder`)."""
    from inferq.serving import run_asgi

    return run_asgi(create_app(latency_s), host, port)
