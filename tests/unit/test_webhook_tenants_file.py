"""A tenant's `webhook_secret` in the tenants file: read, checked, and never repeated in a message."""

from __future__ import annotations

import base64

import pytest

from inferq.tenancy.errors import TenantsFileError
from inferq.tenancy.loading import parse_tenants
from inferq.tenancy.secret_forms import new_webhook_secret, webhook_key
from tests.support.tenants import TenantSpec, tenants_toml

GOOD = new_webhook_secret()
OLD = new_webhook_secret()


def test_the_secret_is_read_and_kept_out_of_reprs():
    directory = parse_tenants(tenants_toml(TenantSpec("acme", extra={"webhook_secret": GOOD})))
    tenant = directory.get("acme")
    assert tenant is not None and tenant.webhook_secret is not None
    assert tenant.webhook_secret.get_secret_value() == GOOD
    assert len(webhook_key(GOOD)) == 32
    assert GOOD not in repr(tenant) and GOOD not in repr(directory)
    assert parse_tenants(tenants_toml(TenantSpec("beta"))).get("beta").webhook_secret is None  # type: ignore[union-attr]


def test_two_secrets_may_be_active_for_a_rotation_the_first_is_current():
    directory = parse_tenants(tenants_toml(TenantSpec("acme", extra={"webhook_secret": [GOOD, OLD]})))
    tenant = directory.get("acme")
    assert tenant is not None
    assert [s.get_secret_value() for s in tenant.webhook_secrets] == [GOOD, OLD]
    assert tenant.webhook_secret is not None and tenant.webhook_secret.get_secret_value() == GOOD


def _b64(size: int) -> str:
    return "whsec_" + base64.b64encode(b"k" * size).decode()


@pytest.mark.parametrize(
    "secret",
    [
        "whsec_" + "ab-_" * 10,  # the URL-safe form of old: not standard base64
        "short-but-secret",
        _b64(23),  # too few bytes
        _b64(65),  # too many
        _b64(32)[6:],  # no prefix
        _b64(32) + "!",
        "",
    ],
)
def test_a_secret_that_is_not_a_standard_webhooks_secret_is_refused_without_being_quoted(secret):
    with pytest.raises(TenantsFileError) as caught:
        parse_tenants(tenants_toml(TenantSpec("acme", extra={"webhook_secret": secret})))
    message = str(caught.value)
    assert "webhook_secret: must be 'whsec_' and the base64 of 24-64 random bytes" in message
    assert message.startswith("<tenants>:5: ")  # the field's own line
    if secret:
        assert secret not in message


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (12345, "webhook_secret: must be a list of 1 to 2"),
        ([GOOD, OLD, new_webhook_secret()], "webhook_secret: must be a list of 1 to 2"),
        ([GOOD, GOOD], "the same secret is listed twice"),
        ("whsec_replace-me-with-inferq-tenants-webhook-secret-output", "the example file's placeholder"),
    ],
)
def test_a_wrong_list_a_repeat_or_the_placeholder_is_refused(value, problem):
    with pytest.raises(TenantsFileError) as caught:
        parse_tenants(tenants_toml(TenantSpec("acme", extra={"webhook_secret": value})))
    assert problem in str(caught.value)
    assert GOOD not in str(caught.value)
