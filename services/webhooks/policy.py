"""The rules a callback URL must pass, for one tenant: the same at submission and at delivery.

`CallbackPolicy.check(url, tenant)` runs them in order: the form (`urls`), the host against the
tenant's allowed hosts (`hosts`), a signing secret to sign with, then the SSRF guard (`guard`)
on every address the host resolves to. Ingest answers 422 with the refusal's `problem`; the
results service dead-letters the delivery (or, when the name merely did not resolve, retries).

Whose rules: with a tenants file, the tenant's `callback_hosts` and `webhook_secrets` (one, or two
while one is rotated: each signs; a tenant the file no longer lists gets none: its webhooks are
refused); in open mode, the settings' ``INFERQ_CALLBACK_HOSTS`` and ``INFERQ_WEBHOOK_SECRET``.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferq.tenancy.model import NameSet, Tenant
from inferq.webhooks.errors import CallbackRefusedError
from inferq.webhooks.guard import AddressGuard
from inferq.webhooks.hosts import host_allowed, open_mode_hosts
from inferq.webhooks.settings import WebhookSettings
from inferq.webhooks.signing import WebhookSecrets
from inferq.webhooks.urls import CallbackTarget, IPAddress, parse_callback_url


@dataclass(frozen=True)
class CheckedCallback:
    """A callback that passed every rule: where to, the addresses that may be connected to, and the
    keys to sign with (never logged)."""

    target: CallbackTarget
    addresses: tuple[IPAddress, ...]
    secret: WebhookSecrets

    def __repr__(self) -> str:
        return f"CheckedCallback({self.target.origin}, {len(self.addresses)} addresses)"


class CallbackPolicy:
    def __init__(self, settings: WebhookSettings, guard: AddressGuard) -> None:
        self._settings = settings
        self._guard = guard
        self._open_hosts = open_mode_hosts(settings.callback_hosts)

    def allowed(
        self, url: str, tenant: Tenant | None, *, open_mode: bool
    ) -> tuple[CallbackTarget, WebhookSecrets]:
        """The form, the host and the secrets (no DNS); `CallbackRefusedError` saying which failed."""
        target = parse_callback_url(
            url, allow_http=self._settings.allow_http, max_chars=self._settings.max_url_chars
        )
        hosts, secret, where = self._tenant_rules(tenant, open_mode=open_mode)
        if not host_allowed(target, hosts):
            raise CallbackRefusedError(
                f"host {target.host!r} is not among {where} (allowed: {hosts.describe()})"
            )
        if secret is None:
            raise CallbackRefusedError(
                "no webhook secret to sign with: set INFERQ_WEBHOOK_SECRET"
                if open_mode
                else "no webhook secret to sign with: this tenant has no webhook_secret in the tenants file"
            )
        return target, secret

    async def check(self, url: str, tenant: Tenant | None, *, open_mode: bool) -> CheckedCallback:
        """Every rule, the SSRF guard last; `CallbackRefusedError` (`permanent` false only when the
        host did not resolve)."""
        target, secret = self.allowed(url, tenant, open_mode=open_mode)
        addresses = await self._guard.addresses(target)
        return CheckedCallback(target, tuple(addresses), secret)

    def _tenant_rules(
        self, tenant: Tenant | None, *, open_mode: bool
    ) -> tuple[NameSet, WebhookSecrets | None, str]:
        if open_mode:
            secret = self._settings.secret
            keys = WebhookSecrets.of([secret]) if secret is not None else None
            return self._open_hosts, keys, "INFERQ_CALLBACK_HOSTS"
        if tenant is None:
            raise CallbackRefusedError("the request's tenant is not in the tenants file")
        keys = WebhookSecrets.of(tenant.webhook_secrets) if tenant.webhook_secrets else None
        return tenant.entitlements.callback_hosts, keys, "this tenant's callback_hosts"
