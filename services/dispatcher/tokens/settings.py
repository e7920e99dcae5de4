"""Settings of the group-wide token budget in Redis (env prefix ``INFERQ_REDIS_``).

The one place the dispatcher reads Redis settings from (`DispatcherSettings.redis`), used only with
``INFERQ_COORDINATION=redis``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import Field, FilePath, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from inferq.dispatcher.tokens.redis_endpoint import RedisEndpoint

from inferq.redaction import redacted_url

DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_KEY_PREFIX = "inferq:budget"


@dataclass(frozen=True, slots=True)
class RedisTls:
    """The files of a ``rediss://`` connection: the CA that signed the server's certificate (PEM),
    and a client certificate and key when the server asks for one. The server's host name is
    verified against its certificate."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def redis_kwargs(self) -> dict[str, Any]:
        """redis-py's ``ssl_*`` connection options (certificate verification is always required)."""
        kwargs: dict[str, Any] = {"ssl_cert_reqs": "required", "ssl_check_hostname": True}
        if self.ca_file is not None:
            kwargs["ssl_ca_certs"] = str(self.ca_file)
        if self.cert_file is not None:
            kwargs["ssl_certfile"] = str(self.cert_file)
        if self.key_file is not None:
            kwargs["ssl_keyfile"] = str(self.key_file)
        return kwargs


class RedisBudgetSettings(BaseSettings):
    """Where the dispatcher group keeps its shared budget, and how long a silent owner's tokens last.

    ``url`` is ``redis://`` or, for TLS, ``rediss://``; with TLS ``ca_file`` is the CA that signed
    the server's certificate (else the system's store) and ``cert_file``/``key_file`` a client
    certificate, when the server requires one (they are refused with a ``redis://`` URL, which
    would silently not use them). ``password`` is sent with AUTH; kept apart
    from the URL, it never shows up in logs or reprs (a password written in the URL works too, and
    wins, as redis-py has it; reprs and logs redact it). ``key_prefix`` defaults to
    ``<topic prefix>:budget``, so pipelines sharing a cluster and a Redis keep separate budgets.
    ``lease_ttl_s`` bounds how long a crashed dispatcher's tokens stay taken (the spec allows 10 s);
    ``call_timeout_s`` bounds every Redis call, and so how long a dispatcher waits before it falls back
    to its local share when Redis stops answering. A renewal runs every ``lease_ttl_s / 3`` at most, so
    a call must fit well inside that period.
    """

    # hide_input_in_errors: a refused URL may carry a password.
    model_config = SettingsConfigDict(
        env_prefix="INFERQ_REDIS_", extra="ignore", hide_input_in_errors=True, use_attribute_docstrings=True
    )

    url: str = DEFAULT_URL
    """The Redis of INFERQ_COORDINATION=redis: redis:// or, for TLS, rediss:// (a password written
    here works, and is never printed)."""
    password: SecretStr | None = None
    """Sent with AUTH; kept apart from the URL."""
    ca_file: FilePath | None = None
    """rediss:// only: the CA that signed the server's certificate (PEM); unset: the system's store."""
    cert_file: FilePath | None = None
    """rediss:// only: a client certificate (PEM), with INFERQ_REDIS_KEY_FILE, when the server asks."""
    key_file: FilePath | None = None
    """rediss:// only: the client certificate's private key (PEM)."""
    key_prefix: str | None = Field(default=None, min_length=1)
    """The budget's Redis keys' prefix; unset: <topic prefix>:budget, so pipelines sharing a Redis
    keep separate budgets."""
    lease_ttl_s: float = Field(default=6.0, ge=0.3, le=10.0)
    """How long a crashed dispatcher's tokens stay taken (renewed every third of it)."""
    call_timeout_s: float = Field(default=0.5, gt=0, le=5.0)
    """Bound of every Redis call: past it the dispatcher falls back to its local share."""

    @model_validator(mode="after")
    def _call_fits_in_renewal_period(self) -> RedisBudgetSettings:
        if self.call_timeout_s >= self.lease_ttl_s / 3:
            raise ValueError(
                f"call_timeout_s ({self.call_timeout_s}) must be below lease_ttl_s / 3 "
                f"({self.lease_ttl_s / 3:.3f}): a renewal must finish before the next one is due"
            )
        return self

    @model_validator(mode="after")
    def _tls_files_need_tls(self) -> RedisBudgetSettings:
        files = (self.ca_file, self.cert_file, self.key_file)
        if any(f is not None for f in files) and not self.uses_tls:
            raise ValueError(
                "INFERQ_REDIS_CA_FILE/CERT_FILE/KEY_FILE are set but INFERQ_REDIS_URL is not rediss://"
            )
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("INFERQ_REDIS_CERT_FILE and INFERQ_REDIS_KEY_FILE go together")
        return self

    @property
    def uses_tls(self) -> bool:
        return urlsplit(self.url).scheme == "rediss"

    def tls(self) -> RedisTls | None:
        """The TLS files of a ``rediss://`` URL; None for ``redis://``."""
        if not self.uses_tls:
            return None
        return RedisTls(self.ca_file, self.cert_file, self.key_file)

    def endpoint(self) -> RedisEndpoint:
        """The Redis these settings name, as the token pool and the rate budget both reach it."""
        # Imported here: redis-py is loaded only by a dispatcher that coordinates through Redis.
        from inferq.dispatcher.tokens.redis_endpoint import RedisEndpoint

        password = self.password.get_secret_value() if self.password else None
        return RedisEndpoint(self.url, password, self.tls(), self.call_timeout_s)

    def key_prefix_for(self, topic_prefix: str) -> str:
        """The Redis key prefix of the budget: the configured one, else ``<topic prefix>:budget``."""
        return self.key_prefix or f"{topic_prefix}:budget"

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, redacted_url(value) if name == "url" and isinstance(value, str) else value
