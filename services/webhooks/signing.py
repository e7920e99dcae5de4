"""Webhook signatures in the Standard Webhooks form (https://www.standardwebhooks.com).

The headers of every delivery (docs/api.md, "Webhooks", shows a receiver verifying them with the
`standardwebhooks` package):

    webhook-id:        the delivery id, the same on every retry (receivers deduplicate by it)
    webhook-timestamp: the attempt's time, Unix seconds
    webhook-signature: ``v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<raw body>">``, one entry per
                       secret, space-separated

The key is the base64-decoded part of the tenant's ``whsec_`` secret (`secret_forms.webhook_key`).
Signing the id and the timestamp with the body lets a receiver trust the id it deduplicates on and
refuse a replayed old delivery. A tenant rotating its secret has two: each signs, and a receiver
holding either accepts. ``Inferq-Attempt`` (1, 2, 3...) is informational and unsigned: nothing
should be decided on it.

Signing is ours (a few lines over the raw bytes, the package's verifier is the test of it, see
tests/unit/test_webhook_signing.py). Keys never leave this module in a message or a repr.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import SecretStr

from inferq.tenancy.model import MAX_SECRETS
from inferq.tenancy.secret_forms import webhook_key

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
ATTEMPT_HEADER = "Inferq-Attempt"
SCHEME = "v1"


def signature(key: bytes, message_id: str, timestamp: int, body: bytes) -> str:
    """The base64 HMAC-SHA256 of ``b"<message_id>.<timestamp>." + body`` under `key`."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


@dataclass(frozen=True, repr=False)
class WebhookSecrets:
    """The keys a tenant's deliveries are signed with: one, or two while a secret is rotated."""

    keys: tuple[bytes, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.keys) <= MAX_SECRETS or not all(self.keys):
            raise ValueError(f"need 1 to {MAX_SECRETS} non-empty webhook keys")

    @classmethod
    def of(cls, secrets: Iterable[SecretStr]) -> WebhookSecrets:
        """From checked ``whsec_`` secrets (the tenants file's, or ``INFERQ_WEBHOOK_SECRET``)."""
        return cls(tuple(webhook_key(s.get_secret_value()) for s in secrets))

    def signature_header(self, message_id: str, timestamp: int, body: bytes) -> str:
        """The ``webhook-signature`` value: a ``v1,<base64>`` entry per key, space-separated."""
        return " ".join(f"{SCHEME},{signature(k, message_id, timestamp, body)}" for k in self.keys)

    def headers(self, message_id: str, timestamp: int, body: bytes) -> dict[str, str]:
        """The three signed headers of one attempt."""
        return {
            ID_HEADER: message_id,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: self.signature_header(message_id, timestamp, body),
        }

    def __repr__(self) -> str:
        return f"WebhookSecrets({len(self.keys)} keys)"
