"""A request as the dispatcher holds it once read (`Work`), for the scheduling steps' unit tests."""

from __future__ import annotations

from typing import Any

from inferq.dispatcher.offsets import PartitionOffsets
from inferq.dispatcher.work import Work
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.tiers import Tier


def a_work(tier: Tier, offset: int = 0, *, offsets: PartitionOffsets | None = None, **request: Any) -> Work:
    """A `tier` request read at `offset` (of `offsets`, by default a fresh tracker of partition 0 of
    ``t.<tier>``): id ``<tier>-<offset>``, created at 0 ms, due at 10**9 ms; `request` sets any
    field of the request (created_at_ms, expire_at_ms, tenant, model, ...)."""
    fields = {
        "request_id": f"{tier}-{offset}",
        "scenario": "test",
        "created_at_ms": 0,
        "expire_at_ms": 10**9,
        "messages": (ChatMessage("user", "hi"),),
    } | request
    return Work(
        request=InferenceRequest(tier=tier, **fields),
        tier=tier,
        offsets=offsets or PartitionOffsets(f"t.{tier}", 0),
        offset=offset,
    )
