"""A request's deadline, from what its caller asked to how long a connection waits for its outcome.

All of it on the service's injected clock (`clock_ms`), never the machine's own:

- `expire_at_ms`: the deadline the record is written with (the caller's absolute one, else now plus
  the caller's relative one or the tier's, the tier's cut to the tenant's maximum);
- `within_patience`: that deadline cut to the SDK's timeout (a chat caller gone by then reads nothing);
- `wait_s`: how long a connection waits for the outcome (the deadline plus the grace in which the
  dispatcher still answers EXPIRED itself, at most the connection's own bound).
"""

from __future__ import annotations

from inferq.messaging.limits import MAX_DEADLINE_MS


class FieldRefusedError(ValueError):
    """A field that is well-formed but refused in context (the clock, the topic prefix); the
    endpoint answers 422 naming `field`, counted under `reason`."""

    field = "body"
    reason = "invalid"


class DeadlineInPastError(FieldRefusedError):
    """The caller's absolute deadline has already passed: nobody would wait for the answer."""

    field = "expire_at_ms"
    reason = "deadline_past"


class DeadlineTooFarError(FieldRefusedError):
    """The caller's absolute deadline is further away than any topic keeps a request."""

    field = "expire_at_ms"


def expire_at_ms(
    now_ms: int,
    *,
    asked_expire_at_ms: int | None,
    asked_deadline_ms: int | None,
    tier_deadline_ms: int,
    max_deadline_ms: int | None = None,
) -> int:
    """The record's deadline at `now_ms`. Raises `DeadlineInPastError` when the caller's absolute
    deadline is not in the future, `DeadlineTooFarError` when it is more than `MAX_DEADLINE_MS` ahead."""
    if asked_expire_at_ms is not None:
        if asked_expire_at_ms <= now_ms:
            raise DeadlineInPastError(
                f"expire_at_ms {asked_expire_at_ms} is {now_ms - asked_expire_at_ms} ms ago"
            )
        if asked_expire_at_ms - now_ms > MAX_DEADLINE_MS:
            raise DeadlineTooFarError(f"must be at most {MAX_DEADLINE_MS} ms (7 days) from now")
        return asked_expire_at_ms
    default_ms = tier_deadline_ms if max_deadline_ms is None else min(tier_deadline_ms, max_deadline_ms)
    return now_ms + (asked_deadline_ms or default_ms)


def within_patience(created_at_ms: int, expire_at_ms: int, patience_ms: int | None) -> int:
    """`expire_at_ms` cut to `patience_ms` after `created_at_ms` (no cut when None)."""
    if patience_ms is None:
        return expire_at_ms
    return min(expire_at_ms, created_at_ms + patience_ms)


def wait_s(expire_at_ms: int, now_ms: int, *, grace_s: float, max_wait_s: float) -> float:
    """How long a connection waits at `now_ms` for the outcome of a request expiring at
    `expire_at_ms`: until the deadline plus `grace_s`, at most `max_wait_s`, never below 0."""
    left_s = (expire_at_ms - now_ms) / 1000 + grace_s
    return max(0.0, min(max_wait_s, left_s))
