"""The LLM backend client: OpenAI chat-completions over HTTP.

Messages are forwarded unchanged. Each call is bounded by a timeout the caller computes from the
request's remaining deadline. Failures become `BackendError` with `retriable` set as the mission
says: timeouts, connection errors, 429 and 5xx may be retried; other 4xx may not.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import httpx

from services.dispatcher.errors import BackendError


@dataclass(frozen=True)
class Completion:
    output: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatBackend:
    def __init__(self, base_url: str, *, api_key: str | None, max_connections: int) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def close(self) -> None:
        await self._client.aclose()

    async def complete(
        self, model: str, messages: list[dict[str, str]], params: dict[str, Any], *, timeout_s: float
    ) -> Completion:
        payload = {"model": model, "messages": messages, **params}
        try:
            response = await self._client.post("/chat/completions", json=payload, timeout=timeout_s)
        except httpx.TimeoutException as exc:
            raise BackendError(
                f"backend timed out after {timeout_s:.2f} s", retriable=True, timed_out=True
            ) from exc
        except httpx.TransportError as exc:
            raise BackendError(f"backend unreachable: {exc!r}", retriable=True) from exc
        if response.status_code != 200:
            raise _status_error(response)
        try:
            body = response.json()
            usage = body.get("usage") or {}
            return Completion(
                output=str(body["choices"][0]["message"]["content"]),
                model=str(body.get("model", model)),
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
                total_tokens=int(usage.get("total_tokens", 0)),
            )
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise BackendError(
                f"backend answered 200 with an unreadable body: {exc!r}", retriable=True
            ) from exc


def _status_error(response: httpx.Response) -> BackendError:
    status = response.status_code
    detail = response.text[:300]
    with contextlib.suppress(ValueError, KeyError, TypeError):
        detail = str(json.loads(response.text)["error"]["message"])[:300]
    retry_after: float | None = None
    header = response.headers.get("retry-after")
    if header is not None:
        try:
            retry_after = float(header)
        except ValueError:
            retry_after = None
    retriable = status == 429 or status >= 500
    return BackendError(
        f"backend answered {status}: {detail}", retriable=retriable, status=status, retry_after_s=retry_after
    )
