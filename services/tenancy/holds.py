"""What each tenant holds now, per kind of held resource, within its `HeldLimits`: `HeldResources`.

A service process has one `HeldResources`. Before a request takes a resource that outlives a quick
answer (a connection, an event stream, a long poll, a streamed chat, a call waiting for its
answer), the endpoint asks `acquire(tenant, kind)`: a `Lease` when the tenant holds fewer than its
limit of that kind, else a `HoldRefusal` (the endpoint answers 429 with `retry_after_s`) and
nothing is taken. A lease is released once, however the request ended (`release` is idempotent; a
lease is a context manager): a cancelled or disconnected request gives its slot back.

The limit is read from the `Tenant` passed in, which the caller took from the registry in force
for this request: a reload that lowers a limit refuses new holds at once, and holds already taken
run out as they end. Counts are kept by tenant name, so every key of a tenant shares its limits.
Pure bookkeeping on one event loop: no lock, no task, no clock.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, get_args

from inferq.tenancy.model import Tenant

HeldKind = Literal["connections", "event_streams", "long_polls", "streamed_chats", "held_calls"]
HELD_KINDS: tuple[HeldKind, ...] = get_args(HeldKind)
# What a refused caller is told: a held slot frees when some other request of the tenant ends,
# which is not predictable; a second is short enough not to idle a client, long enough to matter.
DEFAULT_RETRY_AFTER_S = 1


@dataclass(frozen=True)
class HoldRefusal:
    """`tenant` holds its limit of `kind` (`limit`); retry after `retry_after_s` (whole seconds)."""

    tenant: str
    kind: HeldKind
    limit: int
    retry_after_s: int

    @property
    def message(self) -> str:
        """For the caller: the limit's name and value, never a key."""
        return (
            f"tenant {self.tenant!r} holds its limit of {self.limit} {self.kind} at once "
            f"(limits.{self.kind} = {self.limit}); retry when one has ended"
        )

    def body(self) -> dict[str, object]:
        """The native API's 429 body (the quota's shape, as the rate's)."""
        return {
            "error": self.message,
            "quota": self.kind,
            "tenant": self.tenant,
            "limit": self.limit,
            "retry_after_s": self.retry_after_s,
        }

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class Lease:
    """One held resource of a tenant; `release()` gives it back (once; later calls do nothing)."""

    __slots__ = ("_holds", "_key", "_released")

    def __init__(self, holds: HeldResources, key: tuple[str, HeldKind]) -> None:
        self._holds = holds
        self._key = key
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._holds._give_back(self._key)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class HeldResources:
    """Counts of held resources per (tenant, kind), and the refusals past a limit."""

    def __init__(self, *, retry_after_s: int = DEFAULT_RETRY_AFTER_S) -> None:
        if retry_after_s < 1:
            raise ValueError(f"retry_after_s must be >= 1, got {retry_after_s}")
        self._retry_after_s = retry_after_s
        self._in_use: Counter[tuple[str, HeldKind]] = Counter()
        self._refused: Counter[tuple[str, HeldKind]] = Counter()

    def acquire(self, tenant: Tenant, kind: HeldKind) -> Lease | HoldRefusal:
        """A lease of one `kind` for `tenant`, or the refusal when it holds its limit already."""
        limit: int = getattr(tenant.limits, kind)
        key = (tenant.name, kind)
        if self._in_use[key] >= limit:
            self._refused[key] += 1
            return HoldRefusal(tenant.name, kind, limit, self._retry_after_s)
        self._in_use[key] += 1
        return Lease(self, key)

    def in_use(self, tenant: str, kind: HeldKind) -> int:
        """How many of `kind` `tenant` holds now."""
        return self._in_use[(tenant, kind)]

    def in_use_counts(self) -> dict[tuple[str, HeldKind], int]:
        """Every (tenant, kind) ever held, with what is held now (0 once released)."""
        return dict(self._in_use)

    def refused_counts(self) -> dict[tuple[str, HeldKind], int]:
        """Refusals since start, per (tenant, kind)."""
        return dict(self._refused)

    def _give_back(self, key: tuple[str, HeldKind]) -> None:
        # Kept at 0 rather than deleted: the gauge then reads 0 instead of vanishing.
        self._in_use[key] = max(0, self._in_use[key] - 1)
