"""One tier's waiting work, served across tenants by weight: start-time fair queueing.

Each tenant has its own FIFO (a *flow*). Every flow carries a virtual start tag; the queue's
virtual time is the tag of the last request served. A request is served from the flow with the
smallest tag among the flows that may start (a tenant at its concurrency cap may not, see
`may_start`); serving it advances that flow's tag by ``1 / weight``. So while A and B both have
work waiting, B gets ``wB / (wA + wB)`` of the tier's starts whatever A's backlog: B's k-th request
starts after at most about ``k x (1 + wA / wB)`` starts of the tier, not after A's whole backlog.

No credit is saved: a flow that was empty (or could not start, being at its cap) re-enters at the
queue's virtual time, not at its old tag, so idling never buys a burst later. Weights are read at
each start (`weight_of`), so a reloaded tenants file takes effect at once. Every request costs one
start: the budget is counted in calls, not tokens of text.

Ties (equal tags) go to the flow whose head is oldest, then by tenant name: deterministic, and
with one tenant the queue is exactly the FIFO it replaced.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator

from inferq.dispatcher.work import Work

# Finish tags of idle flows kept beyond this many are pruned when they no longer matter.
_IDLE_TAGS_KEPT = 64


class FairQueue:
    def __init__(self, weight_of: Callable[[str], float]) -> None:
        self._weight_of = weight_of
        self._flows: dict[str, deque[Work]] = {}
        # Per backlogged flow: the virtual start tag of its head.
        self._start: dict[str, float] = {}
        # Per flow served: the virtual finish tag of its last start (where its next one may begin).
        self._finish: dict[str, float] = {}
        self._vtime = 0.0
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[Work]:
        for flow in self._flows.values():
            yield from flow

    def append(self, work: Work) -> None:
        tenant = work.request.tenant
        flow = self._flows.get(tenant)
        if flow is None:
            flow = self._flows[tenant] = deque()
            self._start[tenant] = max(self._vtime, self._finish.get(tenant, self._vtime))
        flow.append(work)
        self._len += 1

    def extend_front(self, works: Iterable[Work]) -> None:
        """Put `works` (promoted from a lower tier) first in their tenants' flows, oldest first."""
        by_tenant: dict[str, list[Work]] = {}
        for work in works:
            by_tenant.setdefault(work.request.tenant, []).append(work)
        for tenant, ahead in by_tenant.items():
            ahead.sort(key=lambda w: w.created_at_ms)
            behind = self._flows.pop(tenant, deque())
            self._start.pop(tenant, None)
            self._len -= len(behind)
            for work in [*ahead, *behind]:
                self.append(work)

    def put_back(self, work: Work) -> None:
        """Return `work` (its call preempted) to its tenant's flow ahead of every request of the flow
        created after it, as if it had never left; its tenant's tag is not given back (its start
        was served)."""
        tenant = work.request.tenant
        flow = self._flows.get(tenant)
        if flow is None:
            self.append(work)
            return
        at = next((i for i, w in enumerate(flow) if w.created_at_ms > work.created_at_ms), len(flow))
        flow.insert(at, work)
        self._len += 1

    def head(self, tenant: str) -> Work | None:
        """`tenant`'s oldest waiting request (the next of its flow), if any."""
        flow = self._flows.get(tenant)
        return flow[0] if flow else None

    def heads(self, may_start: Callable[[str], bool]) -> tuple[int, int | None]:
        """How many requests may start (their tenant is not at its cap), and the oldest head's
        creation time among those flows."""
        count, oldest = 0, None
        for tenant, flow in self._flows.items():
            if may_start(tenant):
                count += len(flow)
                created = flow[0].created_at_ms
                oldest = created if oldest is None else min(oldest, created)
        return count, oldest

    def peek(self, may_start: Callable[[str], bool]) -> Work | None:
        """The request `pop` would return now, left in place."""
        best = self._best(may_start)
        return None if best is None else self._flows[best[2]][0]

    def _best(self, may_start: Callable[[str], bool]) -> tuple[float, int, str] | None:
        best: tuple[float, int, str] | None = None
        for tenant, flow in self._flows.items():
            if not may_start(tenant):
                continue
            key = (max(self._start[tenant], self._vtime), flow[0].created_at_ms, tenant)
            if best is None or key < best:
                best = key
        return best

    def pop(self, may_start: Callable[[str], bool]) -> Work | None:
        """The next request by fair share among the tenants that may start; None if there is none."""
        best = self._best(may_start)
        if best is None:
            return None
        start, _, tenant = best
        flow = self._flows[tenant]
        work = flow.popleft()
        self._len -= 1
        self._vtime = start
        finish = start + 1.0 / self._weight(tenant)
        self._finish[tenant] = finish
        if flow:
            self._start[tenant] = finish
        else:
            self._forget(tenant)
        return work

    def remove_if(self, condition: Callable[[Work], bool]) -> list[Work]:
        """Remove and return the requests for which `condition` holds; the others keep their order."""
        removed: list[Work] = []
        for tenant in list(self._flows):
            flow = self._flows[tenant]
            keep: deque[Work] = deque()
            for work in flow:
                (removed if condition(work) else keep).append(work)
            if keep:
                self._flows[tenant] = keep
            else:
                self._forget(tenant)
        self._len -= len(removed)
        return removed

    def clear(self) -> list[Work]:
        return self.remove_if(lambda _: True)

    def _weight(self, tenant: str) -> float:
        weight = self._weight_of(tenant)
        return weight if weight > 0 else 1.0

    def _forget(self, tenant: str) -> None:
        """`tenant`'s flow is empty: drop it, keep its finish tag (no credit for coming back)."""
        self._flows.pop(tenant, None)
        self._start.pop(tenant, None)
        if len(self._finish) > len(self._flows) + _IDLE_TAGS_KEPT:
            vtime = self._vtime
            self._finish = {t: f for t, f in self._finish.items() if t in self._flows or f > vtime}
