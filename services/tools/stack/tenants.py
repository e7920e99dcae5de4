"""Tenants files for a stack, a bench or a test: keys made on the spot, the file written from a few
fields per tenant (`infra/tenants.example.toml` documents each field). The keys are real and held in
memory only; the file gets their hashes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferq.tenancy.keys import hash_key, new_key


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

    @property
    def key(self) -> str:
        return self.keys[0]

    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.key}"}

    def toml(self) -> str:
        lines = [
            "[[tenants]]",
            f"name = {json.dumps(self.name)}",
            f"keys = {json.dumps([hash_key(k) for k in self.keys])}",
            f"weight = {self.weight}",
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


def tenants_toml(*specs: TenantSpec) -> str:
    return "\n".join(spec.toml() for spec in specs)


def write_tenants(path: Path, *specs: TenantSpec) -> Path:
    """Write the file atomically (a rename), as an operator's tooling should."""
    staging = path.with_suffix(".tmp")
    staging.write_text(tenants_toml(*specs), encoding="utf-8")
    staging.replace(path)
    return path
