"""Settings of the group-wide token budget in Redis (env prefix ``INFERQ_REDIS_``)."""

from __future__ import annotations

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_KEY_PREFIX = "inferq:budget"


class RedisBudgetSettings(BaseSettings):
    """Where the dispatcher group keeps its shared budget, and how long a silent owner's tokens last.

    ``lease_ttl_s`` bounds how long a crashed dispatcher's tokens stay taken (the spec allows 10 s);
    ``call_timeout_s`` bounds every Redis call, and so how long a dispatcher waits before it falls back
    to its local share when Redis stops answering. A renewal runs every ``lease_ttl_s / 3`` at most, so
    a call must fit well inside that period.
    """

    model_config = SettingsConfigDict(env_prefix="INFERQ_REDIS_", extra="ignore")

    url: str = DEFAULT_URL
    # Kept apart from the URL so it never shows up in logs or reprs.
    password: SecretStr | None = None
    key_prefix: str = Field(default=DEFAULT_KEY_PREFIX, min_length=1)
    lease_ttl_s: float = Field(default=6.0, ge=0.3, le=10.0)
    call_timeout_s: float = Field(default=0.5, gt=0, le=5.0)

    @model_validator(mode="after")
    def _call_fits_in_renewal_period(self) -> RedisBudgetSettings:
        if self.call_timeout_s >= self.lease_ttl_s / 3:
            raise ValueError(
                f"call_timeout_s ({self.call_timeout_s}) must be below lease_ttl_s / 3 "
                f"({self.lease_ttl_s / 3:.3f}): a renewal must finish before the next one is due"
            )
        return self
