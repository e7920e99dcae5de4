"""Webhook settings (env prefix ``INFERQ_WEBHOOK_``; the open-mode host list is ``INFERQ_CALLBACK_HOSTS``),
shared by ingest (submission checks) and the results service (delivery)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from inferq.tenancy.secret_forms import webhook_secret_problem
from inferq.webhooks.urls import MAX_URL_CHARS

# An entry of INFERQ_CALLBACK_HOSTS: the tenants file's `callback_hosts` rule (a name, maybe a port).
_HOST_ENTRY = re.compile(
    r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*(:[0-9]{1,5})?"
)


class WebhookSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="INFERQ_WEBHOOK_",
        extra="ignore",
        populate_by_name=True,
        hide_input_in_errors=True,
        use_attribute_docstrings=True,
    )

    enabled: bool = True
    """Off: the results service delivers no webhook (ingest still checks callback_url)."""
    callback_hosts: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(), validation_alias=AliasChoices("INFERQ_CALLBACK_HOSTS", "callback_hosts")
    )
    """Open mode only (no tenants file): the hosts a callback_url may name, comma-separated
    ("hooks.example.com,hooks.example.com:8443"; "*" for any host the SSRF guard lets through).
    With a tenants file each tenant's `callback_hosts` decides instead. Empty: no webhooks."""
    secret: SecretStr | None = None
    """Open mode's signing secret, a Standard Webhooks secret (`inferq tenants webhook-secret` prints
    one; a tenant's is `webhook_secret` in the tenants file). Without one, open mode's webhooks are
    refused at submission."""
    allow_http: bool = False
    """http:// callbacks (tests, a receiver on the same private network); https only by default."""
    allow_private_addresses: bool = False
    """Loopback, private, link-local... addresses: only for tests and a receiver on a private network."""
    max_url_chars: int = Field(default=MAX_URL_CHARS, ge=16, le=MAX_URL_CHARS)
    """The longest callback_url accepted."""
    retry_period_s: float = Field(default=24 * 3_600.0, gt=0, le=7 * 86_400)
    """Deliveries are retried for this long after the result was stored, then dead-lettered."""
    first_backoff_s: float = Field(default=1.0, gt=0, le=3_600)
    """The first retry waits about this long; each next one twice as long, at most max_backoff_s."""
    max_backoff_s: float = Field(default=600.0, gt=0, le=86_400)
    """The longest wait between two attempts."""
    timeout_s: float = Field(default=10.0, gt=0, le=60)
    """One attempt's bound (connect, send, the answer's headers)."""
    connect_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """The bound of an attempt's connect alone."""
    resolve_timeout_s: float = Field(default=5.0, gt=0, le=60)
    """The bound of a callback host's DNS lookup (then "host did not resolve in time": retried at
    delivery, refused at submission)."""
    resolver_threads: int = Field(default=16, ge=1, le=256)
    """Threads of the callbacks' own resolver (per process; each tenant may hold at most its
    `dns_lookups` of them: `inferq.webhooks.resolver`)."""
    max_in_flight: int = Field(default=16, ge=1, le=1_000)
    """Deliveries in flight at once, across tenants; each tenant holds at most its
    `webhooks_in_flight` of them and free slots go round-robin to tenants with deliveries due, so a
    slow receiver holds its own tenant's slots only."""
    poll_interval_s: float = Field(default=1.0, gt=0, le=60)
    """The outbox is read for due deliveries at least this often (a stored result wakes it at once)."""

    @field_validator("callback_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(h.strip().lower() for h in value.split(",") if h.strip())
        return value

    @field_validator("callback_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for host in value:
            if host != "*" and not _HOST_ENTRY.fullmatch(host):
                raise ValueError(f"{host[:80]!r} is not a host or host:port (lowercase DNS name or IPv4)")
        return value

    @field_validator("secret", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("secret")
    @classmethod
    def _standard_webhooks_secret(cls, value: SecretStr | None) -> SecretStr | None:
        # The message names the variable and the rule, never the value (it goes to the terminal).
        problem = None if value is None else webhook_secret_problem(value.get_secret_value())
        if problem is not None:
            raise ValueError(f"INFERQ_WEBHOOK_SECRET {problem}")
        return value
