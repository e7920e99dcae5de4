"""Settings of the group-wide token budget in Redis (env prefix ``INFERQ_REDIS_``).

The one place the dispatcher reads Redis settings from (`DispatcherSettings.redis`), used only with
``INFERQ_COORDINATION=redis``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_KEY_PREFIX = "inferq:budget"


def redacted_url(url: str) -> str:
    """``url`` without its password, for logs and reprs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))


class RedisBudgetSettings(BaseSettings):
    """Where the dispatcher group keeps its shared budget, and how long a silent owner's tokens last.

    ``url`` is ``redis://`` or, for TLS, ``rediss://``. ``password`` is sent with AUTH; kept apart
    from the URL, it never shows up in logs or reprs (a password written in the URL works too, and
    wins, as redis-py has it; reprs and logs redact it). ``key_prefix`` defaults to
    ``<topic prefix>:budget``, so pipelines sharing a cluster and a Redis keep separate budgets.
    ``lease_ttl_s`` bounds how long a crashed dispatcher's tokens stay taken (the spec allows 10 s);
    ``call_timeout_s`` bounds every Redis call, and so how long a dispatcher waits before it falls back
    to its local share when Redis stops answering. A renewal runs every ``lease_ttl_s / 3`` at most, so
    a call must fit well inside that period.
    """

    model_config = SettingsConfigDict(env_prefix="INFERQ_REDIS_", extra="ignore")

    url: str = DEFAULT_URL
    password: SecretStr | None = None
    key_prefix: str | None = Field(default=None, min_length=1)
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

    def key_prefix_for(self, topic_prefix: str) -> str:
        """The Redis key prefix of the budget: the configured one, else ``<topic prefix>:budget``."""
        return self.key_prefix or f"{topic_prefix}:budget"

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, redacted_url(value) if name == "url" and isinstance(value, str) else value
