"""The webhook errors.

CallbackRefusedError   a callback URL these rules refuse (422 at submission, a dead letter at
                       delivery); `problem` says why, without the URL's path or query
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
