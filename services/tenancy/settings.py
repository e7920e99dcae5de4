"""Tenancy settings (env prefix ``INFERQ_TENANTS_``), shared by ingest, results and the dispatcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The largest share of the tenants in force a reload may remove: half, so a copy caught mid-write
# (which drops the tenants after the cut) is refused while a tenant or two can still be taken out.
DEFAULT_MAX_REMOVED_SHARE = 0.5


class TenancySettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="INFERQ_TENANTS_", extra="ignore", use_attribute_docstrings=True
    )

    file: Path | None = None
    """The tenants file (infra/tenants.example.toml). Unset: open mode, which
    serves anyone without a key and so binds only to loopback addresses."""
    reload_interval_s: float = Field(default=2.0, gt=0, le=3_600)
    """How often the file is checked for changes (a SIGHUP reloads at once)."""
    max_removed_share: float = Field(default=DEFAULT_MAX_REMOVED_SHARE, ge=0, le=1)
    """The largest share of the tenants in force a reload may remove (0.5: half); a file removing
    more, or every tenant, is refused and logged, and the tenants in force stay (a copy caught
    mid-write). Not applied at start."""

    @field_validator("file", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # INFERQ_TENANTS_FILE= (set but empty) must not mean the current directory.
        return None if value == "" else value
