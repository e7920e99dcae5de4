"""Tenants as values: who they are, what they may ask for, and their share of the pipeline.

Frozen and validated on construction; `inferq.tenancy.loading` builds them from the tenants
file (each field is documented in ``infra/tenants.example.toml``). `OPEN_TENANT` is the one tenant
of open mode: every entitlement is the global rule.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pydantic import SecretStr

from inferq.messaging import limits
from inferq.messaging.param_rules import passthrough_name_ok
from inferq.messaging.tiers import Tier
from inferq.tenancy.held import UNBOUNDED, HeldLimits
from inferq.tenancy.keys import key_digest

ANY = "*"
ROLES = frozenset({"system", "user", "assistant", "tool", "developer"})
# Roles a tenant has without saying so: system and developer messages steer the model, so they are
# entitlements of their own.
DEFAULT_ROLES = frozenset({"user", "assistant", "tool"})
MAX_KEYS_PER_TENANT = 2
# Secrets in rotation: the current one and the previous (webhook secrets, record keys).
MAX_SECRETS = 2
MAX_WEIGHT = 1_000_000.0

# The global bound of each numeric parameter a tenant may cap (its cap is an upper bound of the
# value; for the penalties, of its absolute value). Other allowed parameters are on or off.
NUMERIC_PARAM_BOUNDS: Mapping[str, float] = MappingProxyType(
    {
        "temperature": limits.MAX_TEMPERATURE,
        "top_p": limits.MAX_TOP_P,
        "max_tokens": limits.MAX_COMPLETION_TOKENS,
        "presence_penalty": limits.MAX_PENALTY,
        "frequency_penalty": limits.MAX_PENALTY,
        "n": limits.MAX_CHOICES,
    }
)
# Parameters whose cap is a whole number of at least 1.
WHOLE_PARAMS = frozenset({"max_tokens", "n"})
SYMMETRIC_PARAMS = frozenset({"presence_penalty", "frequency_penalty"})
# Parameters a tenant has unless its file says false: they name the end user or label the request
# (they steer no model), and inferq took them before it forwarded them.
DEFAULT_PARAMS = frozenset({"user", "safety_identifier", "metadata", "store"})


@dataclass(frozen=True)
class NameSet:
    """A set of names, or every name (`ANY`, spelt ``"*"`` in the file)."""

    names: frozenset[str] = frozenset()
    any: bool = False

    @classmethod
    def of(cls, names: Iterable[str]) -> NameSet:
        listed = frozenset(names)
        return cls(names=listed - {ANY}, any=ANY in listed)

    @classmethod
    def everything(cls) -> NameSet:
        return cls(any=True)

    def __contains__(self, name: object) -> bool:
        return self.any or name in self.names

    def describe(self) -> str:
        """For a refusal: what is allowed instead."""
        if self.any:
            return "any"
        return ", ".join(sorted(self.names)) or "none"


@dataclass(frozen=True)
class Entitlements:
    """What one tenant may ask for. Checked by `inferq.tenancy.entitlements.apply_entitlements`.

    - `max_tier`: the highest tier; a request above it (an explicit priority, an unknown scenario's
      HIGH, a scenario's own tier) is served at `max_tier` instead.
    - `scenarios`, `models`: the names it may use (`model` unset is always allowed).
    - `params`: chat-completions parameters it may set (`limits.ALLOWED_PARAMS`, and pass-through
      names: plain identifiers inferq does not know, `param_rules.passthrough_name_ok`), each
      mapped to a cap (`NUMERIC_PARAM_BOUNDS` names the capped ones) or None for the global bound.
      A `max_tokens` cap is also the value of a request that sets neither it nor
      `max_completion_tokens`, and the cap of `max_completion_tokens` too.
    - `roles`: message roles; `max_estimated_tokens`, `max_deadline_ms`: the largest values.
    - `reply_topics`: the reply topics it may name besides the default one (each must pass the
      global rule, `inferq.messaging.reply_topics`); `callback_hosts`: for result delivery.
    """

    max_tier: Tier
    scenarios: NameSet
    models: NameSet = field(default_factory=NameSet)
    params: Mapping[str, float | None] = field(default_factory=lambda: MappingProxyType({}))
    roles: frozenset[str] = DEFAULT_ROLES
    max_estimated_tokens: int = limits.MAX_ESTIMATED_TOKENS
    max_deadline_ms: int = limits.MAX_DEADLINE_MS
    reply_topics: NameSet = field(default_factory=NameSet)
    callback_hosts: NameSet = field(default_factory=NameSet)

    def __post_init__(self) -> None:
        unknown = {n for n in self.params if n not in limits.ALLOWED_PARAMS and not passthrough_name_ok(n)}
        if unknown:
            raise ValueError(f"not allowed parameters: {', '.join(sorted(unknown))}")
        for name, cap in self.params.items():
            if cap is None:
                continue
            bound = NUMERIC_PARAM_BOUNDS.get(name)
            if bound is None:
                raise ValueError(f"params.{name} takes no cap (true or false)")
            low = 1 if name in WHOLE_PARAMS else 0
            if not (math.isfinite(cap) and low <= cap <= bound):
                raise ValueError(f"params.{name} cap must be within {low}..{bound:g}")
        if not self.roles <= ROLES:
            raise ValueError(f"roles must be among {', '.join(sorted(ROLES))}")
        if not 0 <= self.max_estimated_tokens <= limits.MAX_ESTIMATED_TOKENS:
            raise ValueError(f"max_estimated_tokens must be within 0..{limits.MAX_ESTIMATED_TOKENS}")
        if not 1 <= self.max_deadline_ms <= limits.MAX_DEADLINE_MS:
            raise ValueError(f"max_deadline_ms must be within 1..{limits.MAX_DEADLINE_MS}")
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def passthrough(self) -> frozenset[str]:
        """The names it may pass through: those it may set that inferq does not know."""
        return frozenset(self.params) - limits.ALLOWED_PARAMS

    @classmethod
    def unrestricted(cls) -> Entitlements:
        """The global rules and nothing narrower: open mode's entitlements."""
        return cls(
            max_tier=Tier.HIGH,
            scenarios=NameSet.everything(),
            models=NameSet.everything(),
            params=dict.fromkeys(limits.ALLOWED_PARAMS),
            roles=ROLES,
            reply_topics=NameSet.everything(),
            callback_hosts=NameSet.everything(),
        )


@dataclass(frozen=True)
class Tenant:
    """One tenant: its name (the records' `tenant`), its key digests (one, or two while a key is
    rotated), its weight (share of a tier's backlog at ingest, of the budget at the dispatcher),
    its caps and its entitlements.

    `requests_per_minute` None means no rate limit; `burst` (default: a minute's worth) is how many
    requests may arrive at once. `max_concurrency` None means no cap below the shared budget.
    `webhook_secrets` sign its webhooks (`inferq.webhooks.signing`; the first is current, a
    second is the one being rotated out: each delivery is signed with both); none: it gets none.
    `record_keys` sign the records its producers write straight to Kafka
    (`inferq.messaging.record_signing`; any of them verifies); none: such records are refused.
    `limits` bound what it may hold at once (`inferq.tenancy.held`).
    """

    name: str
    key_digests: tuple[bytes, ...]
    weight: float
    entitlements: Entitlements
    max_concurrency: int | None = None
    requests_per_minute: int | None = None
    burst: int | None = None
    webhook_secrets: tuple[SecretStr, ...] = ()
    record_keys: tuple[SecretStr, ...] = ()
    limits: HeldLimits = field(default_factory=HeldLimits)

    def __post_init__(self) -> None:
        if len(self.name) > limits.MAX_TENANT_CHARS or not limits.ID_PATTERN.fullmatch(self.name):
            raise ValueError(
                f"name must be 1-{limits.MAX_TENANT_CHARS} letters, digits, '.', '_', ':' or '-'"
            )
        if len(self.key_digests) > MAX_KEYS_PER_TENANT:
            raise ValueError(f"at most {MAX_KEYS_PER_TENANT} keys (the current one and the previous)")
        if not (math.isfinite(self.weight) and 0 < self.weight <= MAX_WEIGHT):
            raise ValueError(f"weight must be > 0 and at most {MAX_WEIGHT:g}")
        for name in ("max_concurrency", "requests_per_minute", "burst"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.burst is not None and self.requests_per_minute is None:
            raise ValueError("burst needs requests_per_minute")
        for name in ("webhook_secrets", "record_keys"):
            if len(getattr(self, name)) > MAX_SECRETS:
                raise ValueError(f"at most {MAX_SECRETS} {name} (the current one and the previous)")

    @property
    def webhook_secret(self) -> SecretStr | None:
        """The current webhook secret (the first), or None."""
        return self.webhook_secrets[0] if self.webhook_secrets else None

    @property
    def rate_burst(self) -> int | None:
        """How many requests may arrive at once: `burst`, else a minute's worth."""
        return self.burst if self.burst is not None else self.requests_per_minute

    def __repr__(self) -> str:
        # The digests stay out of reprs (a log line, a traceback's locals).
        return f"Tenant(name={self.name!r}, keys={len(self.key_digests)}, weight={self.weight:g})"


OPEN_TENANT_NAME = "default"
OPEN_TENANT = Tenant(
    name=OPEN_TENANT_NAME,
    key_digests=(),
    weight=1.0,
    entitlements=Entitlements.unrestricted(),
    limits=UNBOUNDED,
)


class TenantDirectory:
    """The tenants of one tenants file, by name and by key digest, and the file-wide settings:
    `service_record_keys` (what inferq's own services sign the records they write with, the
    first current; `inferq.messaging.record_signing`) and `default_limits` (the ``[limits]`` table:
    what a tenant without its own gets). Immutable once built."""

    def __init__(
        self,
        tenants: Iterable[Tenant],
        *,
        service_record_keys: tuple[SecretStr, ...] = (),
        default_limits: HeldLimits | None = None,
    ) -> None:
        if len(service_record_keys) > MAX_SECRETS:
            raise ValueError(f"at most {MAX_SECRETS} service record keys (the current one and the previous)")
        self.service_record_keys = service_record_keys
        self.default_limits = default_limits if default_limits is not None else HeldLimits()
        by_name: dict[str, Tenant] = {}
        by_digest: dict[bytes, Tenant] = {}
        for tenant in tenants:
            if tenant.name in by_name:
                raise ValueError(f"tenant {tenant.name!r} is listed twice")
            by_name[tenant.name] = tenant
            for digest in tenant.key_digests:
                if digest in by_digest:
                    raise ValueError(f"tenant {tenant.name!r} shares a key with {by_digest[digest].name!r}")
                by_digest[digest] = tenant
        self._by_name: Mapping[str, Tenant] = MappingProxyType(by_name)
        self._by_digest: Mapping[bytes, Tenant] = MappingProxyType(by_digest)
        self._weights: Mapping[str, float] = MappingProxyType({t.name: t.weight for t in by_name.values()})

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[Tenant]:
        return iter(self._by_name.values())

    @property
    def tenants(self) -> Mapping[str, Tenant]:
        return self._by_name

    @property
    def weights(self) -> Mapping[str, float]:
        return self._weights

    def get(self, name: str) -> Tenant | None:
        return self._by_name.get(name)

    def tenant_for_key(self, key: str) -> Tenant | None:
        """The tenant holding `key`, by the key's SHA-256 digest (see `inferq.tenancy.keys`)."""
        digest = key_digest(key)
        tenant = self._by_digest.get(digest)
        if tenant is None:
            return None
        # The map found it by equal digests; compare_digest says so again without an early exit.
        if not any(hmac.compare_digest(digest, d) for d in tenant.key_digests):
            return None
        return tenant

    def __repr__(self) -> str:
        return f"TenantDirectory({sorted(self._by_name)})"
