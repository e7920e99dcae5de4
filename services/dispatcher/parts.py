"""The collaborators the dispatcher's steps share, grouped as they belong together.

The composition root (``bootstrap.py``) builds each group once; a step takes the groups it works
with instead of a dozen loose arguments. Every field is required: a missing collaborator is an
error at construction, never a silent default.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from inferq.dispatcher.adaptive import AdaptiveBudget, Budget
from inferq.dispatcher.consumer import TierConsumer
from inferq.dispatcher.inflight import InFlight
from inferq.dispatcher.metrics import DispatcherMetrics
from inferq.dispatcher.models import ModelChoice
from inferq.dispatcher.offsets import OffsetTracker
from inferq.dispatcher.pausing import Pauses
from inferq.dispatcher.rate_ledger import RateLedger
from inferq.dispatcher.readahead import ReadAhead
from inferq.dispatcher.retries import RetryPolicy
from inferq.dispatcher.routing import BackendRoutes
from inferq.dispatcher.streaming import ChunkPolicy
from inferq.dispatcher.tokens import TokenPool
from inferq.messaging.topics import TopicNames


@dataclass(frozen=True)
class KafkaPorts:
    """The consumer of the request and retry topics, and the pipeline's topic names."""

    consumer: TierConsumer
    topics: TopicNames


@dataclass(frozen=True)
class HeldBacklog:
    """What this process holds of the backlog, and what bounds it: the read-ahead, the offsets
    tracked per partition, the tasks in flight (calls, outcomes being written) and the pauses."""

    readahead: ReadAhead
    offsets: OffsetTracker
    inflight: InFlight
    pauses: Pauses


@dataclass(frozen=True)
class Instruments:
    """The clocks a step reads (wall-clock milliseconds for records and deadlines, monotonic
    seconds for durations) and the metrics it records."""

    metrics: DispatcherMetrics
    clock_ms: Callable[[], int]
    monotonic: Callable[[], float]


@dataclass(frozen=True)
class Budgets:
    """What bounds the starts: the token pool (`pool_is_shared`: with other dispatchers), the
    effective budget (`adaptive`, when it adapts) up to `max_budget`, and the rate budget; `wake`
    is set when a start may have become possible (a token came back, work arrived)."""

    pool: TokenPool
    pool_is_shared: bool
    budget: Budget
    adaptive: AdaptiveBudget | None
    max_budget: int
    rate: RateLedger
    wake: asyncio.Event


@dataclass(frozen=True)
class CallPolicy:
    """Where and how a request is called: the backend routes, the model per request, the retry
    policy, how a streamed answer is chunked, and the backend call's timeout."""

    routes: BackendRoutes
    models: ModelChoice
    retries: RetryPolicy
    chunks: ChunkPolicy
    backend_timeout_s: float
