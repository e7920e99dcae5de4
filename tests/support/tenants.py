"""Tenants files for tests: the tooling's writer (one home: `inferq.tools.stack.tenants`)."""

from inferq.tools.stack.tenants import TenantSpec, tenants_toml, write_tenants

__all__ = ["TenantSpec", "tenants_toml", "write_tenants"]
