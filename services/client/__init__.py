"""inferq's Python client: one surface, two transports.

    from inferq.client import HttpTransport, InferqClient

    async with InferqClient(HttpTransport("http://localhost:8700", api_key=KEY)) as client:
        outcome = await client.infer("realtime_chat", "hi")

- `InferqClient` (async) and `SyncInferqClient` (its own loop in a thread): `submit`, `result`,
  `infer` (submit and wait), `stream` (chunks of the answer as the backend writes them);
- `HttpTransport`: ingest's and results' HTTP API (long poll when the results service has it);
- `KafkaTransport`: Avro requests straight to the tier topics and outcomes from the region's reply
  topic, for backends that already speak Kafka (one follower of the reply topic per transport);
- the errors (`errors`: `RefusedError`, `InvalidRequestError`, `NotAuthorizedError`, `ExpiredError`,
  `EvictedError`, `FailedError`, `RejectedError`, `WaitTimeoutError`, `TransportError`) and the
  types (`models`: `Handle`, `Chunk`, `Outcome`).

The package is product code: it never imports inferq's tooling.
"""

from __future__ import annotations

from inferq.client.client import InferqClient, Stream, SyncInferqClient
from inferq.client.errors import (
    EvictedError,
    ExpiredError,
    FailedError,
    InferqError,
    InvalidRequestError,
    NotAuthorizedError,
    OutcomeError,
    RefusedError,
    RejectedError,
    TransportError,
    WaitTimeoutError,
)
from inferq.client.http import HttpTransport
from inferq.client.models import Chunk, Handle, Outcome, Submission


def __getattr__(name: str) -> object:
    # Imported on first use: an HTTP-only caller does not load the Kafka clients.
    if name == "KafkaTransport":
        from inferq.client.kafka import KafkaTransport

        return KafkaTransport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Chunk",
    "EvictedError",
    "ExpiredError",
    "FailedError",
    "Handle",
    "HttpTransport",
    "InferqClient",
    "InferqError",
    "InvalidRequestError",
    "KafkaTransport",
    "NotAuthorizedError",
    "Outcome",
    "OutcomeError",
    "RefusedError",
    "RejectedError",
    "Stream",
    "Submission",
    "SyncInferqClient",
    "TransportError",
    "WaitTimeoutError",
]
