"""The webhook errors.

CallbackRefusedError   a callback URL these rules refuse (422 at submission, a dead letter at
                       delivery); `problem` says why, without the URL's path or query
 └── LookupsBusyError  the tenant has its `dns_lookups` of callback host lookups in flight already
                       (429 with Retry-After at submission, a retry later at delivery)
"""

from __future__ import annotations


class CallbackRefusedError(ValueError):
    """A callback URL refused by the rules of `inferq.webhooks`: its form, its host, or the address
    its host resolves to. `permanent` is false when trying again later may succeed (the name did not
    resolve: DNS may be down)."""

    def __init__(self, problem: str, *, permanent: bool = True) -> None:
        super().__init__(problem)
        self.problem = problem
        self.permanent = permanent


class LookupsBusyError(CallbackRefusedError):
    """The tenant's callback host lookups in flight are at its `dns_lookups` limit
    (`inferq.webhooks.resolver`): not a judgement of the URL, try again after `retry_after_s`."""

    def __init__(self, tenant: str, limit: int, retry_after_s: int) -> None:
        super().__init__(
            f"tenant {tenant!r} has {limit} callback host lookups in flight (dns_lookups); retry later",
            permanent=False,
        )
        self.tenant = tenant
        self.limit = limit
        self.retry_after_s = retry_after_s
