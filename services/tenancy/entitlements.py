"""What a tenant may ask for: one pure function, shared by ingest and the dispatcher.

    apply_entitlements(request: InferenceRequest, entitlements: Entitlements, *,
                       default_reply_topic: str) -> Verdict

Given a request record (as ingest builds it, or as the dispatcher decodes it from Kafka) and the
entitlements of the tenant it belongs to, it says whether the tenant may send it, and what it
becomes: no I/O, no clock, no logging; the same input always gives the same `Verdict`.

- Refused (a `Problem` per field, in this order): a scenario, a model, a message role, an
  `estimated_tokens` or a deadline (``expire_at_ms - created_at_ms``) over the tenant's, a
  `reply_to` other than `default_reply_topic` that the tenant does not list, a parameter it may not
  set or whose value is over its cap (`tools` entitles `tool_choice` and `parallel_tool_calls`
  too, `max_tokens` entitles `max_completion_tokens` and caps it, `limits.ENTITLED_WITH`); a
  pass-through field is a parameter its tenant lists by name. Ingest answers 403 with them; the
  dispatcher sends the record to the dead-letter topic with them and answers FAILED
  (``services/dispatcher/tenant_check.py``).
- Narrowed (`Verdict.narrowed` names each): a tier above `max_tier` becomes `max_tier` (the
  record's `tier`, hence its topic at ingest); a tenant with a `max_tokens` cap that sets neither
  `max_tokens` nor `max_completion_tokens` gets the cap as `max_tokens` (not an embedding request:
  it has no completion). A refused request is never narrowed.

It does not check the global rules (field bounds in `inferq.messaging.limits`, the reply-topic
rule in `inferq.messaging.reply_topics`): those run first, for every tenant, and answer 422.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from inferq.messaging import limits
from inferq.messaging.errors import DecodeError
from inferq.messaging.param_rules import passthrough_name_ok
from inferq.messaging.records import InferenceRequest
from inferq.tenancy.model import SYMMETRIC_PARAMS, Entitlements


@dataclass(frozen=True)
class Problem:
    """One refused field: its name in the record (``messages.3.role``, ``params.max_tokens``) and why."""

    field: str
    problem: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "problem": self.problem}


@dataclass(frozen=True)
class Verdict:
    """`problems` empty: the tenant may send `request` (narrowed as `narrowed` says)."""

    request: InferenceRequest
    problems: tuple[Problem, ...] = ()
    narrowed: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return not self.problems


def apply_entitlements(
    request: InferenceRequest, entitlements: Entitlements, *, default_reply_topic: str
) -> Verdict:
    """Whether `request` is within `entitlements`, and the request as it may run (see module doc)."""
    e = entitlements
    problems: list[Problem] = []
    if request.scenario not in e.scenarios:
        problems.append(
            Problem("scenario", f"not entitled to this scenario (entitled: {e.scenarios.describe()})")
        )
    if request.model is not None and request.model not in e.models:
        problems.append(
            Problem("model", f"not entitled to choose this model (entitled: {e.models.describe()})")
        )
    refused_roles: dict[str, int] = {}
    for index, message in enumerate(request.messages):
        if message.role not in e.roles:
            refused_roles.setdefault(message.role, index)
    problems += [
        Problem(
            f"messages.{index}.role",
            f"not entitled to {role!r} messages (entitled: {', '.join(sorted(e.roles))})",
        )
        for role, index in sorted(refused_roles.items(), key=lambda item: item[1])
    ]
    if request.estimated_tokens is not None and request.estimated_tokens > e.max_estimated_tokens:
        problems.append(Problem("estimated_tokens", f"over this tenant's maximum, {e.max_estimated_tokens}"))
    if request.expire_at_ms - request.created_at_ms > e.max_deadline_ms:
        problems.append(
            Problem("expire_at_ms", f"deadline over this tenant's maximum, {e.max_deadline_ms} ms")
        )
    if (
        request.reply_to is not None
        and request.reply_to != default_reply_topic
        and request.reply_to not in e.reply_topics
    ):
        problems.append(
            Problem("reply_to", f"not entitled to this reply topic (entitled: {e.reply_topics.describe()})")
        )
    params, param_problems = _params(request, e)
    problems += param_problems
    if problems:
        return Verdict(request, tuple(problems))
    narrowed: list[str] = []
    tier = request.tier
    if tier.rank < e.max_tier.rank:
        tier = e.max_tier
        narrowed.append("tier")
    cap = e.params.get("max_tokens")
    # An embedding has no completion to cap (and takes no params).
    if (
        cap is not None
        and not {"max_tokens", "max_completion_tokens"} & set(params)
        and not request.is_embedding
    ):
        params = params | {"max_tokens": json.dumps(int(cap))}
        narrowed.append("params.max_tokens")
    if not narrowed:
        return Verdict(request)
    return Verdict(
        replace(request, tier=tier, params=MappingProxyType(params) if params else None),
        narrowed=tuple(narrowed),
    )


def _params(request: InferenceRequest, e: Entitlements) -> tuple[dict[str, str], list[Problem]]:
    """The request's params (JSON-encoded, as on the wire) and the problems of each."""
    raw = dict(request.params or {})
    try:
        values = request.decoded_params()
    except DecodeError:
        return raw, [Problem("params", "not a map of JSON values")]
    problems: list[Problem] = []
    for name in sorted(values):
        value = values[name]
        field = f"params.{name}"
        with_name = limits.ENTITLED_WITH.get(name)
        if name not in limits.ALLOWED_PARAMS and not passthrough_name_ok(name):
            problems.append(Problem(field, "not a parameter any request may set"))
        elif name not in e.params and with_name not in e.params and not limits.at_default(name, value):
            problems.append(Problem(field, "not entitled to set this parameter"))
        elif (cap := _cap(name, e)) is not None and not _within(name, value, cap):
            problems.append(Problem(field, f"over this tenant's cap, {cap:g}"))
    return raw, problems


def _cap(name: str, e: Entitlements) -> float | None:
    """The cap of `name`: its own, and that of the parameter it is entitled with (the lower one)."""
    caps = [
        c for c in (e.params.get(name), e.params.get(limits.ENTITLED_WITH.get(name, ""))) if c is not None
    ]
    return min(caps) if caps else None


def _within(name: str, value: Any, cap: float) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return abs(value) <= cap if name in SYMMETRIC_PARAMS else value <= cap
