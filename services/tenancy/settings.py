"""Tenancy settings (env prefix ``INFERQ_TENANTS_``), shared by ingest, results and the dispatcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class TenancySettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="INFERQ_TENANTS_", extra="ignore", use_attribute_docstrings=True
    )

    file: Path | None = None
    """The tenants file (infra/tenants.example.toml). Unset: open mode, which
    serves anyone without a key and so binds only to loopback addresses."""
    reload_interval_s: float = Field(default=2.0, gt=0, le=3_600)
    """How often the file is checked for changes (a SIGHUP reloads at once)."""

    @field_validator("file", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        # INFERQ_TENANTS_FILE= (set but empty) must not mean the current directory.
        return None if value == "" else value
