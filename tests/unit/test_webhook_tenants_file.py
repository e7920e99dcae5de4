"""A tenant's `webhook_secret` in the tenants file: read, checked, and never repeated in a message."""

from __future__ import annotations

import pytest

from inferq.tenancy.errors import TenantsFileError
from inferq.tenancy.loading import parse_tenants
from tests.support.tenants import TenantSpec, tenants_toml

GOOD = "whsec_" + "x" * 40


def test_the_secret_is_read_and_kept_out_of_reprs():
    directory = parse_tenants(tenants_toml(TenantSpec("acme", extra={"webhook_secret": GOOD})))
    tenant = directory.get("acme")
    assert tenant is not None and tenant.webhook_secret is not None
    assert tenant.webhook_secret.get_secret_value() == GOOD
    assert GOOD not in repr(tenant) and GOOD not in repr(directory)
    assert parse_tenants(tenants_toml(TenantSpec("beta"))).get("beta").webhook_secret is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "secret",
    ["short-but-secret", "with space " + "x" * 40, "x" * 513, 12345678901234567890123456789012345, ""],
)
def test_a_bad_secret_is_refused_at_its_line_without_being_quoted(secret):
    with pytest.raises(TenantsFileError) as caught:
        parse_tenants(tenants_toml(TenantSpec("acme", extra={"webhook_secret": secret})))
    message = str(caught.value)
    assert "webhook_secret: must be 32-512 printable ASCII characters" in message
    assert message.startswith("<tenants>:5: ")  # the field's own line
    if isinstance(secret, str) and secret:
        assert secret not in message
