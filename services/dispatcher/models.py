"""Which model serves a request: its tier's, unless the request names one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from inferq.dispatcher.work import Work
from inferq.messaging.tiers import Tier


@dataclass(frozen=True)
class ModelChoice:
    """Tier → model (fast for chat, accurate for analysis, cheap for briefs), with the request's
    `model` as an override. The source tier decides, not the scheduling tier: a promoted brief still
    runs on the cheap model."""

    by_tier: Mapping[Tier, str]

    def __post_init__(self) -> None:
        missing = [t.value for t in Tier if not self.by_tier.get(t)]
        if missing:
            raise ValueError(f"no model for tier {', '.join(missing)}")
        object.__setattr__(self, "by_tier", MappingProxyType(dict(self.by_tier)))

    @classmethod
    def of(cls, *, fast: str, accurate: str, cheap: str) -> ModelChoice:
        return cls({Tier.HIGH: fast, Tier.MEDIUM: accurate, Tier.LOW: cheap})

    def model_for(self, work: Work) -> str:
        return work.request.model or self.by_tier[work.tier]
