"""Signatures of the request records written to Kafka: who wrote a record, checked by the dispatcher.

A record names its tenant in its value; anyone allowed to write a request topic could name any.
So every writer signs what it writes with a record key (``irk_...``, `inferq.tenancy.secret_forms`),
and the dispatcher believes the record's tenant only when the signature verifies with one of that
tenant's `record_keys` or with one of the tenants file's ``[service] record_keys`` (inferq's own
writers: ingest, the dispatcher's retries). docs/tenants.md, "Records written to Kafka".

The format (version 1), for a producer in any language:

- the header ``inferq-signature`` holds one or more entries separated by spaces, each
  ``v1,<base64 of the HMAC-SHA256>`` (standard base64, padded); a producer in a key rotation may
  send one entry per key, and one that verifies is enough;
- the HMAC key is the record key as written, its ASCII bytes, ``irk_`` included;
- the MAC covers ``inferq.record.v1`` (16 bytes), then the record's key and value, each preceded by
  its length as 4 bytes big-endian (a null key is the empty key), so bytes cannot be shifted from
  the key into the value or back. The value holds the tenant, the request id and `created_at_ms`.

What it does not cover: the topic (MirrorMaker copies records, headers included, to the central
cluster's topics) and when the record was written (a copy of a signed record written again is the
same request: the same tenant and request id, answered once; `created_at_ms` is bounded by the
broker's timestamp at the dispatcher, ``record_rules.py``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Callable, Iterable, Sequence

from pydantic import SecretStr

SIGNATURE_HEADER = "inferq-signature"
VERSION = "v1"
_DOMAIN = b"inferq.record.v1"
# Entries read from one record at most (two keys in rotation, with room): a header of thousands of
# entries must not cost thousands of HMACs.
MAX_ENTRIES = 4
# An entry is "v1," and 44 characters of base64; the whole header is bounded before it is split.
MAX_HEADER_BYTES = 512

HeaderValue = str | bytes | None


def hmac_key(record_key: str) -> bytes:
    """The HMAC key of a record key (``irk_...``): the key as written, its ASCII bytes."""
    return record_key.encode("ascii")


def _mac(key: bytes, record_key: bytes | None, value: bytes) -> bytes:
    record_key = record_key or b""
    # Fed in parts: a value of up to a megabyte is not copied into one message first.
    mac = hmac.new(key, _DOMAIN, hashlib.sha256)
    for part in (len(record_key).to_bytes(4, "big"), record_key, len(value).to_bytes(4, "big"), value):
        mac.update(part)
    return mac.digest()


def sign(keys: Sequence[bytes], record_key: bytes | None, value: bytes) -> bytes:
    """The ``inferq-signature`` header value of a record signed with each of `keys` (the current
    one first; two during a rotation)."""
    if not keys:
        raise ValueError("no key to sign with")
    entries = (f"{VERSION},{base64.b64encode(_mac(k, record_key, value)).decode()}" for k in keys)
    return " ".join(entries).encode("ascii")


def signature_of(headers: Iterable[tuple[str, HeaderValue]] | None) -> bytes | None:
    """The record's ``inferq-signature`` header (several such headers count as one, joined), or None."""
    found = [
        value.encode() if isinstance(value, str) else value
        for name, value in headers or ()
        if name == SIGNATURE_HEADER and value
    ]
    return b" ".join(found) if found else None


def verify(signature: bytes | None, keys: Iterable[bytes], record_key: bytes | None, value: bytes) -> bool:
    """Whether `signature` (the header's value) holds an entry made with one of `keys` over this
    record. An entry of another version, or not base64, is skipped; only the first `MAX_ENTRIES`
    entries are read, and a header over `MAX_HEADER_BYTES` verifies nothing."""
    if not signature or len(signature) > MAX_HEADER_BYTES:
        return False
    macs: list[bytes] = []
    for entry in signature.split()[:MAX_ENTRIES]:
        version, _, encoded = entry.partition(b",")
        if version != VERSION.encode():
            continue
        try:
            macs.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    if not macs:
        return False
    expected = [_mac(key, record_key, value) for key in keys]
    # Every pair compared (no early exit on the first match): the time says nothing of which key.
    matched = False
    for mac in macs:
        for want in expected:
            matched |= hmac.compare_digest(mac, want)
    return matched


def signature_headers(
    keys: Sequence[bytes], record_key: bytes | None, value: bytes
) -> list[tuple[str, HeaderValue]]:
    """The headers of a signed record (none when there is no key: open mode signs nothing)."""
    return [(SIGNATURE_HEADER, sign(keys, record_key, value))] if keys else []


class RecordSigner:
    """Signs records with the current record key of `keys` (read at each record, so a reloaded
    tenants file applies at once): the first of them, as ``[service] record_keys`` or a tenant's
    `record_keys` list it. No key (open mode): no header."""

    def __init__(self, keys: Callable[[], Sequence[SecretStr]]) -> None:
        self._keys = keys

    @classmethod
    def with_key(cls, record_key: str | None) -> RecordSigner:
        """A signer of one fixed key (a producer's own); None signs nothing."""
        fixed = (SecretStr(record_key),) if record_key else ()
        return cls(lambda: fixed)

    def headers(self, record_key: bytes | None, value: bytes) -> list[tuple[str, HeaderValue]]:
        current = self._keys()[:1]
        return signature_headers([hmac_key(k.get_secret_value()) for k in current], record_key, value)
