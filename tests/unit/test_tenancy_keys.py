"""API keys: random, hashed as sha256:<hex>, parsed strictly from ``Authorization: Bearer``."""

from __future__ import annotations

import hashlib

import pytest

from inferq.messaging.tiers import Tier
from inferq.tenancy.errors import AuthenticationError
from inferq.tenancy.keys import (
    MAX_KEY_CHARS,
    bearer_key,
    digest_of_hash,
    hash_key,
    is_key_hash,
    key_digest,
    new_key,
)
from inferq.tenancy.model import Entitlements, Tenant, TenantDirectory


def test_new_keys_are_random_url_safe_and_carry_256_bits():
    keys = {new_key() for _ in range(200)}
    assert len(keys) == 200
    for key in keys:
        assert key.startswith("iq_") and len(key) == 46
        assert bearer_key([f"Bearer {key}"]) == key


def test_the_hash_is_sha256_of_the_key_in_hex():
    key = "iq_example"
    assert hash_key(key) == "sha256:" + hashlib.sha256(b"iq_example").hexdigest()
    assert is_key_hash(hash_key(key))
    assert digest_of_hash(hash_key(key)) == key_digest(key)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sha256:",
        "sha256:" + "a" * 63,
        "sha256:" + "A" * 64,
        "md5:" + "a" * 64,
        "sha256:" + "a" * 64 + "\n",
    ],
)
def test_malformed_hashes_are_refused_without_quoting_them(text):
    assert not is_key_hash(text)
    with pytest.raises(ValueError) as refused:
        digest_of_hash(text)
    assert "aaa" not in str(refused.value).lower()


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ([], "missing"),
        (["Bearer a", "Bearer b"], "malformed"),
        (["Basic dXNlcjpwYXNz"], "malformed"),
        (["Bearer"], "malformed"),
        (["Bearer "], "malformed"),
        (["Bearer iq_abc def"], "malformed"),
        (["Bearer iq_abc\tdef"], "malformed"),
        (["Bearer iq_abcé"], "malformed"),
        (["Bearer iq_abc\u00a0"], "malformed"),
        (["Bearer iq_" + "a" * MAX_KEY_CHARS], "malformed"),
        (["Bearer " + "a" * 10_000], "malformed"),
        (["iq_abc"], "malformed"),
        (["Bearer\tiq_abc"], "malformed"),
    ],
)
def test_authorization_values_that_are_not_one_bearer_key_are_refused(values, reason):
    with pytest.raises(AuthenticationError) as refused:
        bearer_key(values)
    assert refused.value.reason == reason
    assert "iq_abc" not in str(refused.value) and "aaaa" not in str(refused.value)


def test_the_scheme_is_case_insensitive_and_surrounding_spaces_are_ignored():
    assert bearer_key(["bearer iq_abc"]) == "iq_abc"
    assert bearer_key(["  BEARER   iq_abc=  "]) == "iq_abc="


def test_a_directory_finds_a_tenant_by_either_of_its_keys_and_nobody_by_another():
    current, previous, stranger = new_key(), new_key(), new_key()
    tenant = Tenant(
        "acme",
        (key_digest(current), key_digest(previous)),
        1.0,
        Entitlements(max_tier=Tier.LOW, scenarios=Entitlements.unrestricted().scenarios),
    )
    directory = TenantDirectory([tenant])
    assert directory.tenant_for_key(current) is tenant
    assert directory.tenant_for_key(previous) is tenant
    assert directory.tenant_for_key(stranger) is None
    assert directory.tenant_for_key(hash_key(current)) is None  # the hash is not a key
    assert current not in repr(tenant) and key_digest(current).hex() not in repr(tenant)
