"""The forms of the secrets a tenants file holds, made and checked in one place.

- A webhook secret is a Standard Webhooks secret: ``whsec_`` and the standard base64 of 24 to 64
  random bytes; the signature key is the decoded bytes (`webhook_key`).
- A record key signs the records a producer writes straight to Kafka (`inferq.messaging.record_signing`):
  ``irk_`` and the URL-safe base64 of at least 32 random bytes.

`inferq tenants webhook-secret` and `inferq tenants record-key` print new ones. A check says what is
wrong with a value, never the value: its message goes to logs.
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets

WEBHOOK_SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
MIN_WEBHOOK_SECRET_BYTES = 24
MAX_WEBHOOK_SECRET_BYTES = 64
RECORD_KEY_PREFIX = "irk_"
MIN_RECORD_KEY_BYTES = 32
MAX_RECORD_KEY_CHARS = 512
# The example file's placeholders say this; a file still holding one is refused.
PLACEHOLDER_MARK = "replace-me"
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+={0,2}")


def new_webhook_secret() -> str:
    return WEBHOOK_SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def new_record_key() -> str:
    return RECORD_KEY_PREFIX + secrets.token_urlsafe(MIN_RECORD_KEY_BYTES)


def webhook_key(secret: str) -> bytes:
    """The HMAC key of a checked webhook secret: its base64 part, decoded."""
    return base64.b64decode(secret.removeprefix(WEBHOOK_SECRET_PREFIX), validate=True)


def webhook_secret_problem(value: object) -> str | None:
    """What is wrong with `value` as a webhook secret, or None."""
    if not isinstance(value, str):
        return "must be a string"
    if PLACEHOLDER_MARK in value:
        return "is the example file's placeholder: put `inferq tenants webhook-secret` output here"
    encoded = value.removeprefix(WEBHOOK_SECRET_PREFIX)
    rule = (
        f"must be '{WEBHOOK_SECRET_PREFIX}' and the base64 of {MIN_WEBHOOK_SECRET_BYTES}-"
        f"{MAX_WEBHOOK_SECRET_BYTES} random bytes (a Standard Webhooks secret; `inferq tenants "
        "webhook-secret` prints one)"
    )
    if encoded == value or len(encoded) > 4 * MAX_WEBHOOK_SECRET_BYTES or not _BASE64.fullmatch(encoded):
        return rule
    try:
        size = len(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return rule
    if not MIN_WEBHOOK_SECRET_BYTES <= size <= MAX_WEBHOOK_SECRET_BYTES:
        return rule
    return None


def record_key_problem(value: object) -> str | None:
    """What is wrong with `value` as a record key, or None."""
    if not isinstance(value, str):
        return "must be a string"
    if PLACEHOLDER_MARK in value:
        return "is the example file's placeholder: put `inferq tenants record-key` output here"
    encoded = value.removeprefix(RECORD_KEY_PREFIX)
    if (
        encoded == value
        or len(value) > MAX_RECORD_KEY_CHARS
        or not _BASE64URL.fullmatch(encoded)
        or len(encoded) * 3 // 4 < MIN_RECORD_KEY_BYTES
    ):
        return (
            f"must be '{RECORD_KEY_PREFIX}' and the URL-safe base64 of at least {MIN_RECORD_KEY_BYTES} "
            "random bytes (`inferq tenants record-key` prints one)"
        )
    return None
