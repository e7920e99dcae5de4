"""Webhook signatures: HMAC-SHA256 over ``"<timestamp>.<body>"`` with the tenant's webhook secret.

The headers of every delivery (README, "Webhooks", shows a receiver verifying them):

    Inferq-Delivery:  a UUID, the same on every retry of one delivery (receivers deduplicate by it)
    Inferq-Timestamp: the attempt's time, Unix seconds
    Inferq-Signature: t=<the timestamp>,v1=<hex HMAC-SHA256 of "<timestamp>.<raw body>">

Signing the timestamp with the body lets a receiver refuse a replayed old delivery (compare it
with its clock, within `DEFAULT_TOLERANCE_S`). Several ``v1=`` entries may appear (a secret being
rotated); a receiver accepts a delivery when any of them matches. Secrets never leave this module
in a message: an error says what failed, never with what.
"""

from __future__ import annotations

import hashlib
import hmac

DELIVERY_HEADER = "Inferq-Delivery"
TIMESTAMP_HEADER = "Inferq-Timestamp"
SIGNATURE_HEADER = "Inferq-Signature"
ATTEMPT_HEADER = "Inferq-Attempt"
SCHEME = "v1"
DEFAULT_TOLERANCE_S = 300
# A secret shorter than this is guessable offline from one signed delivery.
MIN_SECRET_BYTES = 16


class SignatureError(ValueError):
    """A signature header that does not verify; the message says why (never the secret)."""


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of ``b"<timestamp>." + body`` under `secret`."""
    return hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def signature_header(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``Inferq-Signature`` value: ``t=<timestamp>,v1=<hex>``."""
    return f"t={timestamp},{SCHEME}={signature(secret, timestamp, body)}"


def verify(
    secret: bytes, header: str, body: bytes, *, now_s: float, tolerance_s: float = DEFAULT_TOLERANCE_S
) -> int:
    """Check an ``Inferq-Signature`` header against the raw `body`; returns its timestamp.
    `SignatureError` when it is malformed, older or newer than `tolerance_s`, or no ``v1`` matches."""
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif name == SCHEME:
            candidates.append(value)
    if timestamp is None or not candidates:
        raise SignatureError("malformed signature header: need t=<seconds> and v1=<hex>")
    if abs(now_s - timestamp) > tolerance_s:
        raise SignatureError(f"timestamp outside the tolerance of {tolerance_s:g} s")
    expected = signature(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, c) for c in candidates):
        raise SignatureError("no signature matches")
    return timestamp
