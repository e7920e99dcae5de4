"""Requests this dispatcher answered OK lately: a record of one read again is not run again.

Kafka may hand the dispatcher a request record twice: MirrorMaker 2 copies again, after a crash,
what it copied since its last offset commit (docs/deployment.md, Regions), and a producer writing
straight to Kafka may resend. Each copy is its own record, at its own offset, so the offset
bookkeeping cannot tell; the request id can. When a record's (tenant, request_id, reply topic) was
answered OK by this process within the last `capacity` OK outcomes, intake completes its offset
without a call and without a second outcome: the first is on the reply topic already, which is
ingest's idempotency rule (the same id from the same tenant is answered once).

Bounds of the rule, by design: only OK outcomes (an EXPIRED or FAILED request sent again runs
again, as a resend after a fix should); only this process (a copy read by another dispatcher of
the group, or after this one restarted, runs again: the results side still keeps one outcome per
request); only once the first answer is written (a copy read while the first still runs runs too).
The reply topic is part of the key, so a resend asking for another reply topic is served there.
"""

from __future__ import annotations

from collections import OrderedDict

DEFAULT_CAPACITY = 100_000  # about 10 MB of keys; at 100 requests a second, the last quarter hour


class RecentlyAnswered:
    """The last `capacity` (tenant, request_id, reply topic) keys answered OK, oldest forgotten first."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._keys: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    def add(self, tenant: str, request_id: str, reply_topic: str) -> None:
        key = (tenant, request_id, reply_topic)
        self._keys[key] = None
        self._keys.move_to_end(key)
        while len(self._keys) > self._capacity:
            self._keys.popitem(last=False)

    def contains(self, tenant: str, request_id: str, reply_topic: str) -> bool:
        return (tenant, request_id, reply_topic) in self._keys

    def __len__(self) -> int:
        return len(self._keys)
