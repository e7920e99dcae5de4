"""How much of the shared services one tenant may hold at once: `HeldLimits`.

A request can hold a resource long after it was admitted: an open event stream, a long poll, a
streamed chat, a webhook delivery waiting on a slow receiver, a DNS lookup of its callback host.
Without a per-tenant bound, one key opening enough of them takes the shared pool (uvicorn's
connection limit, the webhook senders, the resolver's threads) from every other tenant. Each
bound below has a default (`HeldLimits()`), a file-wide default (the tenants file's top-level
``[limits]`` table) and a per-tenant override (``[tenants.limits]``); past one, the tenant gets
429 with Retry-After and the others are unaffected. `MAX_HELD` bounds what a file may grant.
Open mode has one tenant, so there is no other tenant to protect: it gets `UNBOUNDED` (only the
process's own limits, uvicorn's connections and the sender's slots, bound it).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# The largest value any limit may be set to in the tenants file.
MAX_HELD = 1_000_000


@dataclass(frozen=True)
class HeldLimits:
    """Per tenant and per service process:

    - `connections`: HTTP requests of the tenant in progress at once (ingest and results each
      count their own); the held kinds below count here too.
    - `event_streams`: open ``GET /v1/requests/{id}/events`` streams (results service).
    - `long_polls`: ``GET /v1/requests/{id}?wait=`` in progress (results service).
    - `streamed_chats`: open ``stream: true`` chat completions (ingest).
    - `held_calls`: chat completions and embeddings waiting for their answer in one call (ingest).
    - `webhooks_in_flight`: its deliveries being sent at once (a share of the sender's slots).
    - `webhooks_queued`: its deliveries owed; a request with a callback past it is refused.
    - `dns_lookups`: lookups of its callback hosts in flight (the callbacks' own resolver).
    - `reads_per_minute`: requests per minute to the results service (a token bucket; a
      minute's worth may arrive at once).
    """

    connections: int = 200
    event_streams: int = 50
    long_polls: int = 50
    streamed_chats: int = 100
    held_calls: int = 100
    webhooks_in_flight: int = 4
    webhooks_queued: int = 10_000
    dns_lookups: int = 4
    reads_per_minute: int = 12_000

    def __post_init__(self) -> None:
        for name in self.names():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_HELD:
                raise ValueError(f"limits.{name} must be an integer within 1..{MAX_HELD}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


# Open mode's one tenant: every limit at its largest value (nothing per tenant to share).
UNBOUNDED = HeldLimits(**dict.fromkeys(HeldLimits.names(), MAX_HELD))
