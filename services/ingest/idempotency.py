"""A bounded memory of recent client-supplied request ids, per tenant.

A client that resends a request with the same `request_id` (after a timeout, say) gets the first
answer back and no second record is written. The key is (tenant, request_id): another tenant's
request with the same id is a request of its own, never a "duplicate". Concurrent resends wait on
the first attempt. A failed attempt is forgotten so the client can try again. The bound keeps memory
flat; across restarts and instances, the results service's first-result-wins store (keyed the same
way) is the backstop.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

# The 202 body of an accepted request, without its `duplicate` flag.
Answer = dict[str, Any]


class IdempotencyCache:
    """The answers of the last `max_entries` keys (oldest forgotten first); a key is whatever scopes an
    id, (tenant, request_id) in ingest."""

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._entries: OrderedDict[Hashable, asyncio.Future[Answer]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def once(self, key: Hashable, action: Callable[[], Awaitable[Answer]]) -> tuple[Answer, bool]:
        """Run `action` once per key; returns (answer, replayed) where replayed means an earlier answer."""
        existing = self._entries.get(key)
        if existing is not None:
            self._entries.move_to_end(key)
            return await asyncio.shield(existing), True
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._entries[key] = future
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        try:
            answer = await action()
        except BaseException as exc:
            self._entries.pop(key, None)
            if isinstance(exc, Exception):
                future.set_exception(exc)
                future.exception()  # mark retrieved: waiters re-raise it, nobody else must
            else:
                future.cancel()
            raise
        future.set_result(answer)
        return answer, False
