"""Who is calling: a request's ``Authorization: Bearer <key>`` → a `Principal`.

With a tenants file, the key's hash must be one of a tenant's (`TenantDirectory.tenant_for_key`);
`AuthenticationError` says missing, malformed or unknown (the services answer 401). In open mode
(no file) every caller is the anonymous `OPEN_TENANT` and a header, if any, is not looked at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from inferq.tenancy.errors import AuthenticationError
from inferq.tenancy.keys import UNKNOWN, bearer_key
from inferq.tenancy.model import OPEN_TENANT, Tenant, TenantDirectory


@dataclass(frozen=True)
class Principal:
    """The caller: a tenant of the file (`authenticated`), or open mode's anonymous tenant.

    `label` is the value of the `tenant` label of metrics: a name from the file, or ``default`` in
    open mode, so the label set stays bounded by the file.
    """

    tenant: Tenant
    authenticated: bool

    @property
    def name(self) -> str:
        return self.tenant.name

    @property
    def label(self) -> str:
        return self.tenant.name if self.authenticated else OPEN_TENANT.name


ANONYMOUS = Principal(OPEN_TENANT, authenticated=False)


def authenticate(directory: TenantDirectory | None, authorization: Sequence[str]) -> Principal:
    """The principal of a request whose Authorization header values are `authorization`."""
    if directory is None:
        return ANONYMOUS
    key = bearer_key(list(authorization))
    tenant = directory.tenant_for_key(key)
    if tenant is None:
        raise AuthenticationError(UNKNOWN, "unknown API key")
    return Principal(tenant, authenticated=True)
