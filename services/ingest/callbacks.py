"""Ingest's side of webhooks: a submission's `callback_url` checked before anything is written.

The rules are `inferq.webhooks.policy.CallbackPolicy`'s (the results service applies the same
ones again at delivery): the URL's form, the host among the tenant's `callback_hosts` (open mode:
``INFERQ_CALLBACK_HOSTS``), a webhook secret to sign with, and the SSRF guard on every address the
host resolves to now. Any refusal is 422 naming ``callback_url``; a host that does not resolve is
refused too (the caller can send again once its DNS answers).
"""

from __future__ import annotations

from inferq.ingest.errors import InvalidRequestError
from inferq.tenancy.auth import Principal
from inferq.webhooks.errors import CallbackRefusedError
from inferq.webhooks.policy import CallbackPolicy

FIELD = "callback_url"


class CallbackCheck:
    def __init__(self, policy: CallbackPolicy) -> None:
        self._policy = policy

    async def check(self, url: str | None, principal: Principal) -> None:
        """`InvalidRequestError` (422, reason ``callback_refused``) when the callback `url` may not be
        called for this caller; nothing when there is none."""
        if url is None:
            return
        try:
            await self._policy.check(url, principal.tenant, open_mode=not principal.authenticated)
        except CallbackRefusedError as exc:
            problems = [{"field": FIELD, "problem": exc.problem}]
            raise InvalidRequestError(problems, reason="callback_refused") from None
