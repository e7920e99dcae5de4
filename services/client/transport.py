"""The one contract both transports keep (`HttpTransport`, `KafkaTransport`); `InferqClient` is the
surface over it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from inferq.client.models import Chunk, Handle, Outcome, Submission


class Transport(Protocol):
    async def submit(self, submission: Submission) -> Handle:
        """Write the request durably; the `Handle` once accepted. Raises `RefusedError`,
        `InvalidRequestError`, `NotAuthorizedError` or `TransportError`."""
        ...

    async def wait(self, request_id: str, timeout_s: float) -> Outcome | None:
        """The outcome of `request_id` (any status), or None when none arrived within `timeout_s`."""
        ...

    def stream(self, submission: Submission, timeout_s: float) -> AsyncIterator[Chunk | Outcome]:
        """Submit `submission` for streaming and yield its chunks in order, then its `Outcome`
        (the last item). Ends without an outcome when `timeout_s` passes first. Closing the iterator
        early frees what it holds."""
        ...

    def expect(self, request_id: str, expire_at_ms: int) -> None:
        """`request_id` was accepted earlier (another process): catch its outcome from now on, even
        before `wait` is called for it. Over HTTP the results service keeps it: nothing to do."""
        ...

    async def aclose(self) -> None:
        """Release connections, consumers and tasks; idempotent."""
        ...
