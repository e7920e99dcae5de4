"""Tenants files for tests: the tooling's writer (one home: `services.tools.stack.tenants`)."""

from services.tools.stack.tenants import TenantSpec, tenants_toml, write_tenants

__all__ = ["TenantSpec", "tenants_toml", "write_tenants"]
