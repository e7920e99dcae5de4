"""Typed settings for the simulated LLM backend, read from `INFERQ_SIM_*` environment variables."""

from __future__ import annotations

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, Tier
from inferq.tools.simbackend.hangup import OnHangup

# Per-model latency of one call at speed 1, in seconds: the model the dispatcher picks for each tier
# takes that tier's typical latency.
DEFAULT_LATENCY_S: dict[str, float] = {
    "inferq-fast": DEFAULT_MEAN_LATENCY_S[Tier.HIGH],
    "inferq-accurate": DEFAULT_MEAN_LATENCY_S[Tier.MEDIUM],
    "inferq-cheap": DEFAULT_MEAN_LATENCY_S[Tier.LOW],
}


class SimBackendSettings(BaseSettings):
    """How the simulator behaves; every field is also `INFERQ_SIM_<FIELD>` in the environment.

    `latency_s` is JSON in the environment (`INFERQ_SIM_LATENCY_S='{"inferq-fast": 0.2}'`) and is merged over
    `DEFAULT_LATENCY_S`, so overriding one model keeps the others.
    """

    # An empty variable means "not set": `INFERQ_SIM_API_KEY=` must turn auth off, not demand an empty key.
    model_config = SettingsConfigDict(env_prefix="INFERQ_SIM_", env_ignore_empty=True, extra="forbid")

    limit: int = Field(default=10, ge=1, description="calls allowed in progress at once; more get 429")
    retry_after_s: int = Field(default=1, ge=0, description="Retry-After header on 429 and 503, in seconds")
    latency_s: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_LATENCY_S))
    default_latency_s: float = Field(default=1.0, ge=0.0, description="latency of models not in latency_s")
    speed: float = Field(default=1.0, gt=0.0, description="divides every latency: 10 runs ten times faster")
    jitter: float = Field(default=0.0, ge=0.0, lt=1.0, description="0.1 spreads latency uniformly by ±10%")
    seed: int | None = Field(default=None, description="seeds jitter and error draws for reproducible runs")
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0, description="fraction of calls answered 500/503")
    stream_first_token_share: float = Field(
        default=0.3, ge=0.0, le=1.0, description="share of a streamed call's latency before its first token"
    )
    stream_drop_rate: float = Field(
        default=0.0, ge=0.0, le=1.0, description="fraction of streams broken mid-way"
    )
    api_key: SecretStr | None = Field(default=None, description="when set, require `Authorization: Bearer`")
    optimal_concurrency: int | None = Field(
        default=None, ge=1, description="calls in flight beyond this slow every new call down; None: off"
    )
    slope: float = Field(default=0.1, ge=0.0, description="latency growth per call in flight past optimal")
    rpm: int | None = Field(default=None, ge=1, description="requests per minute; past it 429 (None: off)")
    tpm: int | None = Field(
        default=None, ge=1, description="tokens (prompt and answer) per minute; past it 429 (None: off)"
    )

    on_hangup: OnHangup = Field(
        default=OnHangup.KEEP,
        description="a call whose client hangs up: keep (runs on, holds its slot) or free (stops at once)",
    )

    @field_validator("latency_s", mode="after")
    @classmethod
    def _merge_over_defaults(cls, value: dict[str, float]) -> dict[str, float]:
        for model, seconds in value.items():
            if not model:
                raise ValueError("latency_s has an empty model name")
            if seconds < 0:
                raise ValueError(f"latency_s[{model!r}] is negative: {seconds}")
        return {**DEFAULT_LATENCY_S, **value}

    @field_validator("api_key", mode="after")
    @classmethod
    def _reject_empty_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value():
            raise ValueError("api_key is empty; leave it unset to turn auth off")
        return value
