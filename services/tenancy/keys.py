"""API keys: made here, shown once, stored only as their hash.

A key is ``iq_`` + 32 random bytes in URL-safe base64 (43 characters, 256 bits from `secrets`).
The tenants file holds ``sha256:<64 hex digits>`` of the key's UTF-8 bytes, never the key: a copy of
the file (a backup, a ticket) grants nothing. A fast hash is enough because the key is random and
long: there is no dictionary to try, so a slow password hash would add latency and nothing else.

A request's key is hashed once and looked up by its digest (`TenantDirectory.tenant_for_key`).
Looking up by digest rather than comparing keys means the time a lookup takes depends only on the
digest of what the caller sent, which tells the caller nothing about any stored key (finding a key
from a digest prefix is a preimage attack on SHA-256).

Nothing here logs, and no error message quotes a key or a hash.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets

from inferq.tenancy.errors import AuthenticationError

KEY_PREFIX = "iq_"
KEY_RANDOM_BYTES = 32
HASH_PREFIX = "sha256:"
HASH_PATTERN = re.compile(r"sha256:[0-9a-f]{64}")
# RFC 6750's b64token; a key of ours is 46 characters, the bound leaves room for other generators.
MAX_KEY_CHARS = 256
_BEARER = re.compile(r"(?i:bearer) +([A-Za-z0-9._~+/-]+=*)")
# Longer than any valid header value: checked before the regular expression runs.
MAX_AUTHORIZATION_CHARS = len("Bearer ") + MAX_KEY_CHARS

MISSING = "missing"
MALFORMED = "malformed"
UNKNOWN = "unknown"


def new_key() -> str:
    """A new random API key (``iq_`` + 43 URL-safe characters)."""
    raw = secrets.token_bytes(KEY_RANDOM_BYTES)
    return KEY_PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def key_digest(key: str) -> bytes:
    """The SHA-256 digest of a key's UTF-8 bytes."""
    return hashlib.sha256(key.encode("utf-8")).digest()


def hash_key(key: str) -> str:
    """What the tenants file stores for `key`: ``sha256:<hex>``."""
    return HASH_PREFIX + key_digest(key).hex()


def is_key_hash(text: str) -> bool:
    """Whether `text` is a stored key hash (``sha256:`` and 64 lowercase hex digits)."""
    return HASH_PATTERN.fullmatch(text) is not None


def digest_of_hash(text: str) -> bytes:
    """The digest a stored hash spells; `ValueError` (without the value) when it is not one."""
    if not is_key_hash(text):
        raise ValueError("not a key hash: 'sha256:' and 64 lowercase hex digits")
    return bytes.fromhex(text.removeprefix(HASH_PREFIX))


def bearer_key(values: list[str]) -> str:
    """The key of a request's Authorization header values; `AuthenticationError` when there is none
    or it is not exactly one ``Bearer <key>`` of URL-safe characters (no whitespace inside, nothing
    outside ASCII, at most `MAX_KEY_CHARS`)."""
    if not values:
        raise AuthenticationError(MISSING, "missing Authorization header: send 'Authorization: Bearer <key>'")
    if len(values) > 1:
        raise AuthenticationError(MALFORMED, "more than one Authorization header")
    value = values[0].strip(" \t")
    # Bounded before the pattern runs: a 10 KB header costs a length check, not a regex scan or a hash.
    if len(value) > MAX_AUTHORIZATION_CHARS or not value.isascii():
        raise AuthenticationError(MALFORMED, _MALFORMED_MESSAGE)
    match = _BEARER.fullmatch(value)
    if match is None or len(match[1]) > MAX_KEY_CHARS:
        raise AuthenticationError(MALFORMED, _MALFORMED_MESSAGE)
    return match[1]


_MALFORMED_MESSAGE = (
    f"Authorization must be 'Bearer <key>', the key at most {MAX_KEY_CHARS} characters of "
    "letters, digits, '-', '.', '_', '~', '+' or '/'"
)
