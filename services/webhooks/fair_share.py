"""Which due deliveries the sender starts next: its free slots shared fairly across tenants.

Two rules, so one tenant's slow or dead receiver delays only that tenant's own deliveries:

- a tenant has at most its `webhooks_in_flight` (`inferq.tenancy.held.HeldLimits`) deliveries in
  flight at once: a receiver that never answers holds that many slots (each for at most the
  attempt's timeout), never the sender's others;
- free slots go round-robin across tenants with deliveries due, one each per round, starting
  after the tenant served last, so a tenant with 10,000 due rows gets one slot per round like a
  tenant with one.

`pick_round_robin` is the decision (pure); `due_fairly` reads its candidates from the outbox on
the result store's worker thread: per tenant in rotation order (`WebhookOutbox.tenants_from`) at
most its room of due rows (`WebhookOutbox.due_of`), and no more tenants once there is a candidate
for every free slot, nor more than `MAX_TENANTS_PER_PASS` of them (tenant names come from records,
which a producer with access to the reply topic could vary without end): a pass reads a bounded
number of rows, and the next one goes on from where it stopped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from inferq.messaging.reply_positions import ReplyPartition
from inferq.webhooks.outbox import PendingDelivery, WebhookOutbox

_T = TypeVar("_T")
# The most tenants one pass looks at (each costs an index seek and a bounded read).
MAX_TENANTS_PER_PASS = 512


def pick_round_robin(
    candidates: Sequence[tuple[str, Sequence[_T]]], free: int
) -> tuple[list[_T], str | None]:
    """Up to `free` items, one per tenant per round in the order of `candidates` (each tenant's
    items already bounded by its room, its own order kept); with the last tenant served (the next
    pass starts after it), None when nothing was picked."""
    picked: list[_T] = []
    last: str | None = None
    depth = 0
    while len(picked) < free:
        took = False
        for tenant, items in candidates:
            if depth < len(items):
                picked.append(items[depth])
                last, took = tenant, True
                if len(picked) == free:
                    break
        if not took:
            break
        depth += 1
    return picked, last


@dataclass(frozen=True)
class SlotState:
    """The sender's slots as the event loop sees them, handed to the worker thread: `free` slots,
    each tenant's deliveries in flight (`busy`), the delivery ids in flight (`exclude`), and the
    tenant served last (`after`)."""

    free: int
    busy: Mapping[str, int]
    exclude: Collection[str]
    after: str | None


def due_fairly(
    outbox: WebhookOutbox,
    db: sqlite3.Connection,
    slots: SlotState,
    *,
    now_ms: int,
    room_of: Callable[[str], int],
    owned: Collection[ReplyPartition] | None,
    max_tenants: int = MAX_TENANTS_PER_PASS,
) -> tuple[list[PendingDelivery], str | None]:
    """The deliveries to start now (at most `slots.free`, each tenant at most `room_of(tenant)`
    in flight), round-robin from the tenant after `slots.after`; with where the next pass starts
    after (the last tenant served, or, when none was, the last one looked at)."""
    if slots.free <= 0:
        return [], slots.after
    candidates: list[tuple[str, list[PendingDelivery]]] = []
    looked_at: str | None = None
    for seen, tenant in enumerate(outbox.tenants_from(db, slots.after)):
        if seen >= max_tenants:
            break
        looked_at = tenant
        busy = slots.busy.get(tenant, 0)
        room = min(room_of(tenant) - busy, slots.free)
        if room <= 0:
            continue
        rows = outbox.due_of(db, tenant, now_ms=now_ms, limit=room, exclude=slots.exclude, owned=owned)
        if rows:
            candidates.append((tenant, rows))
            if len(candidates) >= slots.free:
                break  # the first round alone fills every free slot
    picked, last = pick_round_robin(candidates, slots.free)
    if last is not None:
        return picked, last
    return picked, looked_at if looked_at is not None else slots.after
