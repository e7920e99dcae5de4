"""Tenants files for a stack, a bench or a test: keys made on the spot, the file written from a few
fields per tenant (`infra/tenants.example.toml` documents each field). The keys are real and held in
memory only; the file gets their hashes.

Every file gets a ``[service] record_keys`` (ingest and the dispatcher refuse to start without one):
`SERVICE_RECORD_KEY`, made once per process, so a test or tool that writes request records straight
to Kafka signs them with it (`inferq.messaging.record_signing`) and the dispatcher believes them,
whatever tenant they name. A tenant given `record_keys` (`TenantSpec.with_record_key`) can sign as
its own producer would."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferq.tenancy.keys import hash_key, new_key
from inferq.tenancy.secret_forms import new_record_key

# The service record key of every file written by this process (module docstring).
SERVICE_RECORD_KEY = new_record_key()


@dataclass
class TenantSpec:
    """One ``[[tenants]]`` entry; `keys` are real keys (the file gets their hashes)."""

    name: str
    keys: list[str] = field(default_factory=lambda: [new_key()])
    weight: float = 1
    max_tier: str = "HIGH"
    scenarios: list[str] = field(default_factory=lambda: ["*"])
    extra: dict[str, Any] = field(default_factory=dict)
    entitlements: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] | None = None
    # Its ``[tenants.limits]`` (`inferq.tenancy.held.HeldLimits`); empty: the file's defaults.
    limits: dict[str, int] = field(default_factory=dict)
    # Its producers' record keys (`with_record_key`); empty: it writes nothing straight to Kafka.
    record_keys: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.keys[0]

    @property
    def record_key(self) -> str:
        """The key its own producers sign records with (the first of `record_keys`)."""
        return self.record_keys[0]

    @classmethod
    def with_record_key(cls, name: str, **fields: Any) -> TenantSpec:
        """A tenant with a record key made on the spot (its producers may write to Kafka)."""
        return cls(name, record_keys=[new_record_key()], **fields)

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}

    def toml(self) -> str:
        lines = [
            "[[tenants]]",
            f"name = {json.dumps(self.name)}",
            f"keys = {json.dumps([hash_key(k) for k in self.keys])}",
            f"weight = {self.weight}",
            *([f"record_keys = {json.dumps(self.record_keys)}"] if self.record_keys else []),
            *(f"{k} = {json.dumps(v)}" for k, v in self.extra.items()),
            "",
            "[tenants.entitlements]",
            f"max_tier = {json.dumps(self.max_tier)}",
            f"scenarios = {json.dumps(self.scenarios)}",
            *(f"{k} = {json.dumps(v)}" for k, v in self.entitlements.items()),
        ]
        if self.params is not None:
            lines += ["", "[tenants.entitlements.params]"]
            lines += [f"{k} = {json.dumps(v)}" for k, v in self.params.items()]
        if self.limits:
            lines += ["", "[tenants.limits]", *(f"{k} = {v}" for k, v in self.limits.items())]
        return "\n".join(lines) + "\n"


def tenants_toml(*specs: TenantSpec, service_record_key: str | None = SERVICE_RECORD_KEY) -> str:
    """The file of `specs`, with ``[service] record_keys`` (last, so a file cut at a tenant's entry
    loses it too) unless `service_record_key` is None."""
    tables = [spec.toml() for spec in specs]
    if service_record_key is not None:
        tables.append(f"[service]\nrecord_keys = {json.dumps([service_record_key])}\n")
    return "\n".join(tables)


def write_tenants(path: Path, *specs: TenantSpec) -> Path:
    """Write the file atomically (a rename), as an operator's tooling should."""
    staging = path.with_suffix(".tmp")
    staging.write_text(tenants_toml(*specs), encoding="utf-8")
    staging.replace(path)
    return path
