"""The LLM backend client: OpenAI chat-completions over HTTP, on aiohttp.

Messages are forwarded unchanged, and so are the parameters (`tools`, `tool_choice`,
`response_format`, `n`, `logprobs`... as the request carries them); the answer's choices come back,
at most the `n` asked, each with its `tool_calls`, `refusal` and `logprobs`. Each call is bounded
by a timeout the caller computes from the request's remaining deadline (for a streamed call, the
whole stream).

`stream` calls with `stream: true` and reads the server-sent events as they come
(``stream_reader.py``): each choice's delta (text, refusal, tool-call pieces, logprobs, its
finish_reason) is handed to `on_delta`, checked; the first choice's answer, its tool calls
assembled, is returned at the end with the usage. A stream that ends without ``[DONE]`` (the
connection dropped, the server died) or carries an `error` object is a retriable `BackendError`;
whether a retry is still allowed once tokens went out is the caller's rule (`execution.py`).

`embed` calls ``POST /embeddings`` with an embedding request's texts (``encoding_format: float``,
`dimensions` when asked); its vectors are checked (`embedding_rules.vectors_problem`: one per text,
finite 32-bit floats, one width, the dimensions asked, within a result's bytes) before they go into
the `Completion`: vectors that fail are a `BackendError` naming the problem, never a value, not
retried (a backend that answers so answers so again).

Failures become `BackendError` with `retriable` set by one rule
(docs/architecture.md, "Retries"): timeouts, connection errors, 429 and 5xx may be retried; other 4xx may not.

A `BackendError`'s message ends up in a FAILED result, a dead-letter header and the logs, so it is a
short reason and nothing else: "backend answered 503", "backend timed out after 2.0 s",
"connection refused". Never the backend's host or URL (aiohttp's connection errors name them),
never its body (which may echo the prompt), never a header (the API key).

aiohttp, not httpx: measured on this machine (`inferq bench throughput`), httpx's connection pool
spends most of the dispatcher's CPU once many calls are in flight (1,841 calls/s with one caller,
263 with 200), while aiohttp keeps 9,000-15,000; the dispatcher ran at 448 requests/s on httpx
and about 2,650 on aiohttp in the same run.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from opentelemetry.trace import Span

from inferq import tracing
from inferq.dispatcher import answer_facts
from inferq.dispatcher.deltas import StreamDelta
from inferq.dispatcher.errors import BackendError
from inferq.dispatcher.stream_reader import StreamReader, sse_data
from inferq.messaging import embedding_rules
from inferq.messaging.records import Choice, TokenDetails


@dataclass(frozen=True)
class Completion:
    output: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    # The first choice's `finish_reason` ("stop", "length"...), when the backend says it.
    finish_reason: str | None = None
    # The rest of what the backend says about its answer, checked by `answer_facts`.
    system_fingerprint: str | None = None
    # The first choice's `message.tool_calls`, as a JSON text.
    tool_calls: str | None = None
    prompt_tokens_details: TokenDetails | None = None
    completion_tokens_details: TokenDetails | None = None
    # The response's rate-limit headers (``x-ratelimit-*``, ``retry-after``), for the rate budget.
    rate_headers: Mapping[str, str] = field(default_factory=dict)
    # Every choice of the answer (the fields above are the first's), with its refusal and
    # logprobs; empty: the fields above are the one choice.
    choices: tuple[Choice, ...] = ()
    # An embedding call's vectors, one per input in order (checked); None for a chat call.
    embeddings: tuple[tuple[float, ...], ...] | None = None


class Backend(Protocol):
    """An OpenAI chat-completions backend, as the dispatcher calls it."""

    async def complete(
        self, model: str, messages: list[dict[str, Any]], params: dict[str, Any], *, timeout_s: float
    ) -> Completion:
        """One call bounded by `timeout_s`; `BackendError` (with `retriable`) when it fails."""
        ...

    async def stream(
        self,
        model: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        *,
        timeout_s: float,
        on_delta: Callable[[StreamDelta], None],
    ) -> Completion:
        """One streamed call bounded by `timeout_s`: each choice's piece (`StreamDelta`) to `on_delta`
        as it arrives, in order; the first choice's answer returned at the end (its output the
        pieces joined, its tool calls assembled).
        `BackendError` when it fails, before or after pieces went to `on_delta`."""
        ...

    async def embed(
        self, model: str, inputs: list[str], dimensions: int | None, *, timeout_s: float
    ) -> Completion:
        """One embeddings call bounded by `timeout_s`: the vectors of `inputs` (checked, in order) in
        the completion's `embeddings`, its usage the prompt's; `BackendError` when it fails."""
        ...

    async def close(self) -> None: ...


class ChatBackend:
    def __init__(self, base_url: str, *, api_key: str | None, max_connections: int) -> None:
        self._url = f"{base_url.rstrip('/')}/chat/completions"
        self._embeddings_url = f"{base_url.rstrip('/')}/embeddings"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._server = urlsplit(self._url).hostname

    def _client(self) -> aiohttp.ClientSession:
        # Built on first use: an aiohttp session belongs to the running event loop.
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self._max_connections)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._headers, trace_configs=tracing.aiohttp_trace_configs()
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(
        self, model: str, messages: list[dict[str, Any]], params: dict[str, Any], *, timeout_s: float
    ) -> Completion:
        return await self._in_chat_span(model, self._complete(model, messages, params, timeout_s))

    async def _complete(
        self, model: str, messages: list[dict[str, Any]], params: dict[str, Any], timeout_s: float
    ) -> Completion:
        payload = {"model": model, "messages": messages, **params}
        text, rate = await self._post(self._url, payload, timeout_s)
        try:
            body = json.loads(text)
            usage = body.get("usage") or {}
            choices = answer_facts.choices(body["choices"], asked=_choices_asked(params))
            first = choices[0]
            return Completion(
                # A message that only calls tools (or refuses) has no content (null).
                output=first.content or "",
                tool_calls=first.tool_calls,
                choices=choices,
                model=answer_facts.model(body.get("model"), asked=model),
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
                total_tokens=int(usage.get("total_tokens", 0)),
                finish_reason=first.finish_reason,
                system_fingerprint=answer_facts.system_fingerprint(body.get("system_fingerprint")),
                prompt_tokens_details=answer_facts.token_details(
                    "prompt_tokens_details", usage.get("prompt_tokens_details")
                ),
                completion_tokens_details=answer_facts.token_details(
                    "completion_tokens_details", usage.get("completion_tokens_details")
                ),
                rate_headers=rate,
            )
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _unreadable(exc) from exc

    async def _post(self, url: str, payload: dict[str, Any], timeout_s: float) -> tuple[str, dict[str, str]]:
        """The body and rate-limit headers of a 200 to `payload` at `url`; `BackendError` else."""
        with _call_errors(timeout_s):
            async with self._client().post(
                url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as response:
                status, text = response.status, await response.text()
                retry_after = response.headers.get("retry-after")
                rate = rate_headers(response.headers)
        if status != 200:
            raise _status_error(status, text, retry_after, rate)
        return text, rate

    async def embed(
        self, model: str, inputs: list[str], dimensions: int | None, *, timeout_s: float
    ) -> Completion:
        return await self._in_chat_span(
            model, self._embed(model, inputs, dimensions, timeout_s), "embeddings"
        )

    async def _embed(
        self, model: str, inputs: list[str], dimensions: int | None, timeout_s: float
    ) -> Completion:
        payload: dict[str, Any] = {"model": model, "input": inputs, "encoding_format": "float"}
        if dimensions is not None:
            payload["dimensions"] = dimensions
        text, rate = await self._post(self._embeddings_url, payload, timeout_s)
        try:
            body = json.loads(text)
            usage = body.get("usage") or {}
            vectors = _vectors(body["data"], len(inputs))
            prompt_tokens = int(usage.get("prompt_tokens", 0))
            total_tokens = int(usage.get("total_tokens", prompt_tokens))
            model_answered = answer_facts.model(body.get("model"), asked=model)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _unreadable(exc) from exc
        problem = embedding_rules.vectors_problem(vectors, inputs=len(inputs), dimensions=dimensions)
        if problem is not None:
            raise BackendError(f"backend answered unusable vectors ({problem})", retriable=False)
        return Completion(
            output="",
            model=model_answered,
            prompt_tokens=prompt_tokens,
            completion_tokens=0,
            total_tokens=total_tokens,
            rate_headers=rate,
            embeddings=tuple(tuple(float(v) for v in vector) for vector in vectors),
        )

    async def stream(
        self,
        model: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        *,
        timeout_s: float,
        on_delta: Callable[[StreamDelta], None],
    ) -> Completion:
        return await self._in_chat_span(model, self._stream(model, messages, params, timeout_s, on_delta))

    async def _in_chat_span(
        self, model: str, call: Awaitable[Completion], operation: str = "chat"
    ) -> Completion:
        """`call` inside its gen_ai span when tracing is on (nothing more than this check when off)."""
        if not tracing.enabled():
            return await call
        with tracing.chat_span(model, self._server, operation=operation) as span:
            return await call if span is None else _traced(span, await _observed(span, call))

    async def _stream(
        self,
        model: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        timeout_s: float,
        on_delta: Callable[[StreamDelta], None],
    ) -> Completion:
        payload = {
            "model": model,
            "messages": messages,
            **params,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        try:
            with _call_errors(timeout_s):
                async with self._client().post(
                    self._url, json=payload, timeout=aiohttp.ClientTimeout(total=timeout_s)
                ) as response:
                    if response.status != 200:
                        text = await response.text()
                        rate = rate_headers(response.headers)
                        raise _status_error(response.status, text, response.headers.get("retry-after"), rate)
                    asked = _choices_asked(params)
                    reader = StreamReader(model, on_delta, choices=asked)
                    async for data in sse_data(response.content):
                        if reader.read(data):
                            return _streamed(reader, model, rate_headers(response.headers), asked=asked)
        # A line over aiohttp's limit (LineTooLong, a ValueError in older aiohttp), bytes not UTF-8.
        except (ValueError, UnicodeDecodeError, aiohttp.http_exceptions.HttpProcessingError) as exc:
            raise BackendError(
                f"backend sent an unreadable stream ({type(exc).__name__})", retriable=True
            ) from exc
        raise BackendError("backend stream ended before [DONE]", retriable=True)


def _unreadable(exc: Exception) -> BackendError:
    return BackendError(
        f"backend answered 200 with an unreadable body ({type(exc).__name__})", retriable=True
    )


def _choices_asked(params: Mapping[str, Any]) -> int:
    """How many choices the request asked for (`n`, checked when the request was read)."""
    n = params.get("n", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1


def _vectors(data: Any, inputs: int) -> list[Any]:
    """The `embedding` of each item of the backend's `data`, in the order of their `index` (each
    0..inputs-1, once; any other is an unreadable body: `ValueError`, `KeyError`, `TypeError`)."""
    if not isinstance(data, list) or len(data) != inputs:
        raise ValueError("data is not one item per input")
    vectors: list[Any] = [None] * inputs
    for item in data:
        index = item["index"]
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < inputs:
            raise ValueError("an item's index is out of range")
        if vectors[index] is not None:
            raise ValueError("two items of one index")
        vectors[index] = item["embedding"]
    return vectors


def _streamed(reader: StreamReader, model: str, rate: Mapping[str, str], *, asked: int) -> Completion:
    """The answer of a stream read to its end, checked as a sync answer is (every choice, at most
    the `asked`), with its model and usage; `BackendError` when it is not usable."""
    answer = reader.answer()
    # In the index order the reader kept: each checked choice is the one said beside it.
    choices = answer_facts.choices(answer, asked=asked)
    for said, kept in zip(answer, choices, strict=False):
        if said["message"]["tool_calls"] and kept.tool_calls is None:
            # Their pieces may have reached the caller already: never a result without them.
            raise BackendError("backend streamed tool calls that are not usable", retriable=True)
    usage = reader.usage
    first = choices[0]
    try:
        return Completion(
            output=first.content or "",
            tool_calls=first.tool_calls,
            choices=choices,
            model=answer_facts.model(reader.answered_model, asked=model),
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            total_tokens=int(usage.get("total_tokens", 0)),
            finish_reason=first.finish_reason,
            system_fingerprint=answer_facts.system_fingerprint(reader.system_fingerprint),
            prompt_tokens_details=answer_facts.token_details(
                "prompt_tokens_details", usage.get("prompt_tokens_details")
            ),
            completion_tokens_details=answer_facts.token_details(
                "completion_tokens_details", usage.get("completion_tokens_details")
            ),
            rate_headers=rate,
        )
    except (ValueError, TypeError, AttributeError) as exc:
        why = f"backend sent an unreadable usage ({type(exc).__name__})"
        raise BackendError(why, retriable=True) from exc


async def _observed(span: Span, call: Awaitable[Completion]) -> Completion:
    """`call`'s completion; a `BackendError` marks the chat span failed (its status, or the kind)."""
    try:
        return await call
    except BackendError as exc:
        kind = str(exc.status) if exc.status else ("timeout" if exc.timed_out else "backend_error")
        tracing.chat_failed(span, kind, str(exc))
        raise


def _traced(span: Span, completion: Completion) -> Completion:
    tracing.chat_result(
        span,
        response_model=completion.model,
        input_tokens=completion.prompt_tokens,
        output_tokens=completion.completion_tokens,
        finish_reason=completion.finish_reason,
    )
    return completion


@contextlib.contextmanager
def _call_errors(timeout_s: float) -> Iterator[None]:
    """A call that timed out or lost its connection, as the `BackendError` the dispatcher reads."""
    try:
        yield
    except TimeoutError as exc:
        raise BackendError.timeout(timeout_s) from exc
    except aiohttp.ClientError as exc:
        raise BackendError(connection_reason(exc), retriable=True) from exc


def connection_reason(exc: aiohttp.ClientError) -> str:
    """What went wrong with the connection, without the host, port or URL aiohttp's message names."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return "connection refused"
        return "connection to the backend failed"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "backend closed the connection"
    if isinstance(exc, aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return "backend sent a broken response"
    return f"backend unreachable ({type(exc).__name__})"


# The headers the rate budget reads; a response's others (cookies, ids) are not kept.
RATE_HEADERS = (
    "x-ratelimit-limit-requests",
    "x-ratelimit-limit-tokens",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "retry-after",
)


def rate_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The rate-limit headers of a response, each at most 64 characters (parsed later, untrusted)."""
    kept = {}
    for name in RATE_HEADERS:
        value = headers.get(name)
        if value is not None:
            kept[name] = str(value)[:64]
    return kept


def _status_error(
    status: int, text: str, retry_after: str | None, rate: Mapping[str, str] | None = None
) -> BackendError:
    kind = answer_facts.error_kind(text)
    seconds: float | None = None
    with contextlib.suppress(ValueError):
        seconds = float(retry_after) if retry_after is not None else None
    if seconds is not None and not 0 <= seconds < float("inf"):
        seconds = None  # a negative, infinite or NaN Retry-After is no advice
    return BackendError(
        f"backend answered {status}{kind}",
        retriable=status == 429 or status >= 500,
        status=status,
        retry_after_s=seconds,
        rate_headers=rate,
    )
