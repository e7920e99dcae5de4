"""The local share of the group's rate budget, for while Redis is away. Pure, with an injected clock.

When Redis stops answering, a dispatcher counts its starts in a local `RateBudget` whose limits are
its share of the group's (``max(1, limit // group_size)``, as the token pool's fallback), and which
starts with what the group had in each model's minute when Redis last said so:

- read within `FRESH_MS` (the model was started, settled or observed that recently): the group's
  requests and tokens then, counted until they leave the minute (a minute after that reading);
- older, or never read: the whole limit, counted for a minute from now. Others may have spent the
  minute since, and we cannot know: this model waits up to a minute rather than risk going over.

So the group keeps under each limit through an outage when every dispatcher has lost Redis and
they agree on the group size (up to what the group started between the last reading and the
outage, at most `FRESH_MS` of starts); a dispatcher cut off from a Redis its peers still reach may
add its share on top of them. No model waits longer than a minute (and a retry-after) for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from inferq.dispatcher.rate_budget import HELD_MS, RateBudget, RateHeaders, RateLimit
from inferq.messaging.tiers import Tier

# A reading of the group's minute older than this is not trusted when Redis goes away.
FRESH_MS = 1_000


@dataclass
class GroupView:
    """One model as Redis last described it: its limits (None: none), the group's requests and
    tokens in the minute, and the end of a retry-after hold, all read at `read_at_ms` (local clock)."""

    rpm: int | None
    tpm: int | None
    requests: int
    tokens: int
    hold_until_ms: int
    read_at_ms: int

    @property
    def limited(self) -> bool:
        return self.rpm is not None or self.tpm is not None


def local_share(limit: int | None, group_size: int) -> int | None:
    """One dispatcher's share of a group's `limit` (None: no limit)."""
    return None if limit is None else max(1, limit // max(1, group_size))


def local_share_budget(
    views: Mapping[str, GroupView],
    configured: Mapping[str, RateLimit],
    *,
    group_size: int,
    floor_shares: Mapping[Tier, float],
    clock_ms: Callable[[], int],
) -> RateBudget:
    """The local budget a dispatcher falls back to when Redis goes away now (module docstring)."""
    limits = {
        model: RateLimit(local_share(v.rpm, group_size), local_share(v.tpm, group_size))
        for model, v in views.items()
        if v.limited
    }
    for model, limit in configured.items():
        if model not in limits:
            limits[model] = RateLimit(local_share(limit.rpm, group_size), local_share(limit.tpm, group_size))
    budget = RateBudget(limits, floor_shares=floor_shares, clock_ms=clock_ms)
    now = clock_ms()
    for model, limit in configured.items():
        view = views.get(model)
        if view is None:  # never read: the whole limit, for a minute
            budget.count_others(model, requests=limit.rpm or 0, tokens=limit.tpm or 0, until_ms=now + HELD_MS)
    for model, view in views.items():
        if not view.limited:
            continue
        if now - view.read_at_ms <= FRESH_MS:
            budget.count_others(
                model, requests=view.requests, tokens=view.tokens, until_ms=view.read_at_ms + HELD_MS
            )
        else:
            budget.count_others(model, requests=view.rpm or 0, tokens=view.tpm or 0, until_ms=now + HELD_MS)
        if view.hold_until_ms > now:
            budget.hold(model, view.hold_until_ms)
    return budget


def shared_headers(headers: RateHeaders, group_size: int) -> RateHeaders:
    """A response's headers as the local share reads them: the limits are the share's, and what the
    backend counts beyond the group's limit less the share is what remains of the share."""

    def remaining(limit: int | None, left: int | None) -> int | None:
        share = local_share(limit, group_size)
        if share is None or limit is None or left is None:
            return None
        return max(0, share - (limit - left))

    return RateHeaders(
        limit_requests=local_share(headers.limit_requests, group_size),
        limit_tokens=local_share(headers.limit_tokens, group_size),
        remaining_requests=remaining(headers.limit_requests, headers.remaining_requests),
        remaining_tokens=remaining(headers.limit_tokens, headers.remaining_tokens),
        reset_requests_s=headers.reset_requests_s,
        reset_tokens_s=headers.reset_tokens_s,
        retry_after_s=headers.retry_after_s,
    )
