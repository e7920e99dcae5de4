"""Ingest's side of webhooks: a submission's `callback_url` checked before anything is written.

The rules are `inferq.webhooks.policy.CallbackPolicy`'s (the results service applies the same
ones again at delivery): the URL's form, the host among the tenant's `callback_hosts` (open mode:
``INFERQ_CALLBACK_HOSTS``), a webhook secret to sign with, and the SSRF guard on every address the
host resolves to now. Any refusal is 422 naming ``callback_url``; a host that does not resolve is
refused too (the caller can send again once its DNS answers).

The lookup runs on the callbacks' own resolver (`inferq.webhooks.resolver`), counted under the
caller's tenant: past its `dns_lookups` in flight the submission is 429 with Retry-After.

A tenant's `webhooks_queued` bound is not checked here: the outbox it bounds lives in the results
service's database, which ingest cannot read cheaply. The results service applies it when the
result is stored (a delivery past it goes to the dead-letter topic; the result stays readable).
"""

from __future__ import annotations

from inferq.ingest.errors import CallbackLookupsBusyError, InvalidRequestError
from inferq.tenancy.auth import Principal
from inferq.webhooks.errors import CallbackRefusedError, LookupsBusyError
from inferq.webhooks.policy import CallbackPolicy
from inferq.webhooks.resolver import LookupOwner, looking_up_for

FIELD = "callback_url"


class CallbackCheck:
    def __init__(self, policy: CallbackPolicy) -> None:
        self._policy = policy

    async def check(self, url: str | None, principal: Principal) -> None:
        """`InvalidRequestError` (422, reason ``callback_refused``) when the callback `url` may not be
        called for this caller, `CallbackLookupsBusyError` (429) when its tenant's lookups are at
        their limit; nothing when there is none."""
        if url is None:
            return
        owner = LookupOwner(principal.label, principal.tenant.limits.dns_lookups)
        try:
            with looking_up_for(owner):
                await self._policy.check(url, principal.tenant, open_mode=not principal.authenticated)
        except LookupsBusyError as exc:
            raise CallbackLookupsBusyError(exc.tenant, exc.limit, exc.retry_after_s) from None
        except CallbackRefusedError as exc:
            problems = [{"field": FIELD, "problem": exc.problem}]
            raise InvalidRequestError(problems, reason="callback_refused") from None
