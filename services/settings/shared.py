"""The values several services read, each declared once under one variable (bare ``INFERQ_``).

A service's settings model names a shared value by its type here (``budget: Budget``), so the
variable, its default, its bounds and its description cannot drift apart between services; the
table test checks that every variable read by several services is described the same everywhere.

Kafka (``INFERQ_KAFKA_*``, ``KAFKA_BOOTSTRAP_SERVERS``, ``INFERQ_TOPIC_PREFIX``), the tenants file
(``INFERQ_TENANTS_*``), webhooks, HTTP and readiness bounds are shared as whole blocks: one
settings class each, nested in (or read beside) every service's own.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from inferq.messaging.tiers import DEFAULT_MEAN_LATENCY_S, DEFAULT_SCENARIO_TIERS, Tier, complete_per_tier

DEFAULT_BUDGET = 10
DEFAULT_MODELS = {"fast": "inferq-fast", "accurate": "inferq-accurate", "cheap": "inferq-cheap"}


def _every_tier_keeps_a_latency(value: dict[Tier, float]) -> dict[Tier, float]:
    # '{"HIGH": 0.05}' changes HIGH only: admission, early drop and eviction read every tier.
    return complete_per_tier(DEFAULT_MEAN_LATENCY_S, value, "typical latency (s)")


Budget = Annotated[
    int,
    Field(
        default=DEFAULT_BUDGET,
        ge=1,
        le=10_000,
        validation_alias="INFERQ_BUDGET",
        description=(
            "The LLM API's concurrency limit, shared by the whole dispatcher group; ingest's "
            "admission scales each tier's backlog capacity and Retry-After with it."
        ),
    ),
]

TypicalLatency = Annotated[
    dict[Tier, float],
    AfterValidator(_every_tier_keeps_a_latency),
    Field(
        default_factory=lambda: dict(DEFAULT_MEAN_LATENCY_S),
        validation_alias="INFERQ_TYPICAL_LATENCY_S",
        description=(
            "Expected inference time per tier in seconds (JSON; tiers left out keep their default): "
            "ingest's backlog capacity and Retry-After, the dispatcher's early drop, eviction and "
            "learned call times start from it."
        ),
    ),
]

ScenarioTiers = Annotated[
    dict[str, Tier],
    Field(
        default_factory=lambda: dict(DEFAULT_SCENARIO_TIERS),
        validation_alias="INFERQ_SCENARIO_TIERS",
        description=(
            "Scenario → tier (JSON). Ingest files a request under its scenario's tier; the "
            "dispatcher never serves a record of the retry topic above it."
        ),
    ),
]


def _model(kind: str, tier: str) -> object:
    """The field of the backend model a tier calls (`INFERQ_MODEL_<KIND>`)."""
    return Field(
        default=DEFAULT_MODELS[kind],
        min_length=1,
        validation_alias=f"INFERQ_MODEL_{kind.upper()}",
        description=f"The backend model {tier} calls; ingest lists it in GET /v1/models.",
    )


ModelFast = Annotated[str, _model("fast", "HIGH")]
ModelAccurate = Annotated[str, _model("accurate", "MEDIUM")]
ModelCheap = Annotated[str, _model("cheap", "LOW")]

DispatcherGroup = Annotated[
    str,
    Field(
        default="inferq-dispatcher",
        min_length=1,
        validation_alias="INFERQ_DISPATCHER_GROUP_ID",
        description=(
            "The dispatchers' Kafka consumer group; ingest reads its lag as the backlog admission decides on."
        ),
    ),
]
