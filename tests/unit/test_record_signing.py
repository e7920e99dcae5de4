"""Record signatures (`inferq.messaging.record_signing`): what verifies and what does not."""

from __future__ import annotations

import base64
import hashlib
import hmac

from pydantic import SecretStr

from inferq.messaging.record_signing import (
    MAX_ENTRIES,
    SIGNATURE_HEADER,
    RecordSigner,
    hmac_key,
    sign,
    signature_of,
    verify,
)
from inferq.tenancy.secret_forms import new_record_key

A, B = hmac_key(new_record_key()), hmac_key(new_record_key())
KEY, VALUE = b"session-1", b"\x00avro bytes naming tenant a"


def test_a_signature_verifies_with_its_key_and_not_with_another():
    signature = sign([A], KEY, VALUE)
    assert signature.startswith(b"v1,")
    assert verify(signature, [A], KEY, VALUE)
    assert not verify(signature, [B], KEY, VALUE)
    assert verify(signature, [B, A], KEY, VALUE)  # any of the keys given


def test_the_documented_format_is_what_a_producer_in_another_language_computes():
    """HMAC-SHA256 with the key's ASCII bytes over the domain, then key and value, each after its
    length as 4 bytes big-endian (docstring of record_signing)."""
    record_key = new_record_key()
    message = b"inferq.record.v1" + len(KEY).to_bytes(4, "big") + KEY + len(VALUE).to_bytes(4, "big") + VALUE
    mac = hmac.new(record_key.encode(), message, hashlib.sha256).digest()
    assert sign([hmac_key(record_key)], KEY, VALUE) == b"v1," + base64.b64encode(mac)


def test_a_changed_byte_of_the_key_or_value_is_refused():
    signature = sign([A], KEY, VALUE)
    changed_value = bytes([VALUE[0] ^ 1]) + VALUE[1:]
    assert not verify(signature, [A], KEY, changed_value)
    assert not verify(signature, [A], b"session-2", VALUE)
    assert not verify(signature, [A], None, VALUE)


def test_bytes_cannot_move_between_the_key_and_the_value():
    signature = sign([A], b"ab", b"cd")
    assert not verify(signature, [A], b"a", b"bcd")
    assert not verify(signature, [A], b"abc", b"d")


def test_rotation_two_entries_either_key_verifies():
    signature = sign([A, B], KEY, VALUE)
    assert signature.count(b" ") == 1
    assert verify(signature, [A], KEY, VALUE)
    assert verify(signature, [B], KEY, VALUE)
    assert not verify(signature, [hmac_key(new_record_key())], KEY, VALUE)


def test_a_missing_or_garbage_header_verifies_nothing():
    assert not verify(None, [A], KEY, VALUE)
    assert not verify(b"", [A], KEY, VALUE)
    assert not verify(b"garbage", [A], KEY, VALUE)
    assert not verify(b"v1,!!!not base64", [A], KEY, VALUE)
    assert not verify(b"v2," + sign([A], KEY, VALUE)[3:], [A], KEY, VALUE)  # an unknown version
    assert not verify(sign([A], KEY, VALUE), [], KEY, VALUE)  # no key to verify with


def test_only_the_first_entries_are_read_and_an_oversized_header_verifies_nothing():
    good = sign([A], KEY, VALUE)
    filler = sign([B], KEY, VALUE)
    assert not verify(b" ".join([filler] * MAX_ENTRIES + [good]), [A], KEY, VALUE)
    assert verify(b" ".join([filler] * (MAX_ENTRIES - 1) + [good]), [A], KEY, VALUE)
    assert not verify(b"x" * 600 + b" " + good, [A], KEY, VALUE)


def test_the_header_is_found_among_others_and_two_such_headers_count_as_one():
    signature = sign([A], KEY, VALUE)
    assert signature_of([("traceparent", b"00-x"), (SIGNATURE_HEADER, signature)]) == signature
    assert signature_of([("traceparent", b"00-x")]) is None
    assert signature_of(None) is None
    joined = signature_of([(SIGNATURE_HEADER, b"v1,AAAA"), (SIGNATURE_HEADER, signature)])
    assert verify(joined, [A], KEY, VALUE)


def test_a_signer_signs_with_the_current_key_only_and_reads_the_keys_each_time():
    keys: list[SecretStr] = []
    signer = RecordSigner(lambda: tuple(keys))
    assert signer.headers(KEY, VALUE) == []  # open mode: nothing to sign with
    first, second = new_record_key(), new_record_key()
    keys[:] = [SecretStr(first), SecretStr(second)]
    [(name, value)] = signer.headers(KEY, VALUE)
    assert name == SIGNATURE_HEADER and isinstance(value, bytes)
    assert verify(value, [hmac_key(first)], KEY, VALUE)
    assert not verify(value, [hmac_key(second)], KEY, VALUE)
    keys[:] = [SecretStr(second)]  # a reload: the next record is signed with the new key
    [(_, value)] = signer.headers(KEY, VALUE)
    assert isinstance(value, bytes) and verify(value, [hmac_key(second)], KEY, VALUE)
