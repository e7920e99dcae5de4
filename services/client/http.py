"""`HttpTransport`: inferq over its HTTP API, with httpx.

- submit: ``POST /v1/requests`` on ingest (202, or a refusal mapped to the client's errors);
- wait: ``GET /v1/requests/{id}?wait=N`` on results, a long poll. A results service without long
  poll answers a pending request 404 at once instead of 202 at the bound; the transport notices that
  on the first such answer and polls from then on, backing off from `poll_min_s` to `poll_max_s`;
- stream: ``POST /v1/requests`` with ``stream: true``, then ``GET /v1/requests/{id}/events``
  (server-sent ``chunk``, ``restart`` and ``result`` events; a late joiner gets the chunks so far).
  An ingest that refuses ``stream`` (422 naming it) or a results service without ``/events`` (404),
  both from before streaming, still answer: the outcome arrives as one chunk.

Ingest and results are two services: `base_url` is ingest's and, unless `results_url` is given,
results' too (one gateway in front of both).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx

from inferq.client.errors import (
    InferqError,
    InvalidRequestError,
    NotAuthorizedError,
    RefusedError,
    TransportError,
)
from inferq.client.models import Chunk, Handle, Outcome, Submission
from inferq.messaging.tiers import Tier

LONG_POLL_MAX_S = 30
# The bound of one HTTP exchange other than a long poll's wait.
REQUEST_TIMEOUT_S = 10.0
# A connection error while waiting is retried after this (within the wait's bound).
RECONNECT_PAUSE_S = 0.5


def retry_after_s(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (a number; the HTTP-date form is not used by inferq)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _message(response: httpx.Response) -> tuple[str, list[dict[str, str]]]:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}", []
    if not isinstance(body, dict):
        return f"HTTP {response.status_code}", []
    error = body.get("error")
    if isinstance(error, dict):  # OpenAI-shaped
        error = error.get("message")
    problems = body.get("problems")
    valid = [p for p in problems if isinstance(p, dict)] if isinstance(problems, list) else []
    return (str(error) if error else f"HTTP {response.status_code}"), valid


def error_of(response: httpx.Response) -> InferqError:
    """The client error of a refusal (any status that is not a success)."""
    message, problems = _message(response)
    status = response.status_code
    if status in (429, 503):
        return RefusedError(message, status_code=status, retry_after_s=retry_after_s(response))
    if status in (401, 403):
        return NotAuthorizedError(message, status_code=status)
    if status in (400, 408, 413, 422):
        return InvalidRequestError(message, status_code=status, problems=problems)
    return TransportError(f"unexpected answer {status}: {message}", retriable=status >= 500)


class HttpTransport:
    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        results_url: str | None = None,
        tenant: str | None = None,
        poll_min_s: float = 0.1,
        poll_max_s: float = 2.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        """`tenant` only in open mode (no keys): the tenant whose results are read."""
        self._ingest = base_url.rstrip("/")
        self._results = (results_url or base_url).rstrip("/")
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = http or httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S)
        self._headers = headers
        self._tenant_query = {"tenant": tenant} if tenant and not api_key else {}
        self._poll_min_s = poll_min_s
        self._poll_max_s = poll_max_s
        # None until the results service showed whether it long-polls.
        self.long_poll: bool | None = None

    async def aclose(self) -> None:
        await self._http.aclose()

    def expect(self, request_id: str, expire_at_ms: int) -> None:
        """Nothing to do: the results service stores every outcome."""

    async def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self._http.request(method, url, headers=self._headers, **kwargs)
        except httpx.TransportError as exc:
            raise TransportError(f"cannot reach inferq ({type(exc).__name__})") from exc

    async def submit(self, submission: Submission) -> Handle:
        response = await self._send("POST", f"{self._ingest}/v1/requests", json=submission.body())
        if response.status_code != 202:
            raise error_of(response)
        body = response.json()
        return Handle(
            request_id=body["request_id"],
            tier=Tier(body["tier"]),
            expire_at_ms=int(body["expire_at_ms"]),
            duplicate=bool(body.get("duplicate", False)),
        )

    async def wait(self, request_id: str, timeout_s: float) -> Outcome | None:
        deadline = time.monotonic() + timeout_s
        pause = self._poll_min_s
        url = f"{self._results}/v1/requests/{request_id}"
        while True:
            left = deadline - time.monotonic()
            wait_s = int(min(max(left, 0), LONG_POLL_MAX_S)) if self.long_poll is not False else 0
            params = dict(self._tenant_query) | ({"wait": str(wait_s)} if wait_s >= 1 else {})
            try:
                response = await self._send("GET", url, params=params, timeout=wait_s + REQUEST_TIMEOUT_S)
            except TransportError:
                response = None
            if response is not None and response.status_code == 200:
                return Outcome.from_view(response.json())
            if response is not None and response.status_code == 202:
                self.long_poll = True
                pause = 0.0  # the server waited for us
            elif response is not None and response.status_code == 404:
                if "wait" in params and self.long_poll is None:
                    # A long-polling service never answers a pending request 404 before the bound.
                    self.long_poll = False
                pause = min(max(pause * 2, self._poll_min_s), self._poll_max_s) if pause else self._poll_min_s
            elif response is not None and response.status_code == 503:
                pause = retry_after_s(response) or 1.0
            elif response is not None:
                raise error_of(response)
            else:
                pause = RECONNECT_PAUSE_S
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await asyncio.sleep(min(pause, left))

    async def stream(self, submission: Submission, timeout_s: float) -> AsyncIterator[Chunk | Outcome]:
        deadline = time.monotonic() + timeout_s
        try:
            handle = await self.submit(submission)
            events = True
        except InvalidRequestError as exc:
            # An ingest from before streaming refuses the field: queue it plainly, answer in one piece.
            if not any(p.get("field") == "stream" for p in exc.problems):
                raise
            handle = await self.submit(replace(submission, stream=False))
            events = False
        request_id = handle.request_id
        if events:
            async for item in self._events(request_id, deadline):
                if item is None:  # no event stream on this results service
                    break
                yield item
                if isinstance(item, Outcome):
                    return
            else:
                return  # the event stream ended at its bound without the outcome
        outcome = await self.wait(request_id, max(deadline - time.monotonic(), 0.0))
        if outcome is None:
            return
        if outcome.output:
            yield Chunk(request_id=request_id, delta=outcome.output, seq=0)
        yield outcome

    async def _events(self, request_id: str, deadline: float) -> AsyncIterator[Chunk | Outcome | None]:
        """``GET /v1/requests/{id}/events``: chunks (a restart marks the next one), then the outcome;
        None first and only when the service has no such route."""
        restart = False
        # The seq the next chunk should have (the event stream replays the answer from its start).
        next_seq = 0
        url = f"{self._results}/v1/requests/{request_id}/events"
        timeout = httpx.Timeout(REQUEST_TIMEOUT_S, read=max(deadline - time.monotonic(), 1.0))
        try:
            async with self._http.stream(
                "GET", url, params=self._tenant_query, headers=self._headers, timeout=timeout
            ) as response:
                if response.status_code == 404:
                    yield None
                    return
                if response.status_code != 200:
                    await response.aread()
                    raise error_of(response)
                async for event, data in _sse(response.aiter_lines()):
                    if event == "restart":
                        restart = True
                    elif event == "chunk":
                        seq = int(data["seq"])
                        yield Chunk(
                            request_id=request_id,
                            delta=str(data["delta"]),
                            seq=seq,
                            attempt=int(data.get("attempt", 1)),
                            restart=restart,
                            gap=not restart and seq > next_seq,
                        )
                        restart, next_seq = False, seq + 1
                    elif event == "result":
                        yield Outcome.from_view(data)
                        return
                    elif event == "error":
                        raise TransportError(f"event stream: {data.get('error', 'error')}")
                    else:  # timeout: the service's bound
                        return
        except httpx.TransportError as exc:
            raise TransportError(f"event stream from inferq broke ({type(exc).__name__})") from exc


async def _sse(lines: AsyncIterator[str]) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event, JSON data) of each server-sent event (inferq writes one ``data:`` line per event)."""
    event = "message"
    async for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data = json.loads(line[5:].strip())
            yield event, data if isinstance(data, dict) else {}
        elif not line:
            event = "message"
