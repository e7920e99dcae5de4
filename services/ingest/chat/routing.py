"""inferq's own choices for a request of the OpenAI endpoints (chat completions, embeddings): its
scenario, tier and deadline, from inferq's headers (or, for a chat, its `metadata`), and the end
user's session key; and `FieldChecks`, the bounds of ``POST /v1/requests``' fields applied value by
value, so these endpoints accept exactly what the native API does and name each problem.

Where inferq's choices come from (a header wins; the same choice in both is refused when they differ):

| choice | header | `metadata` key (chat) | default |
| --- | --- | --- | --- |
| scenario | ``X-Inferq-Scenario`` | ``inferq_scenario`` | the endpoint's default scenario |
| tier | ``X-Inferq-Priority`` (HIGH, MEDIUM, LOW) | ``inferq_priority`` | the scenario's |
| deadline | ``X-Inferq-Deadline-Ms`` (ms from now) | ``inferq_deadline_ms`` | the tier's |
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar, cast

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails
from starlette.datastructures import Headers

from inferq.ingest.chat.errors import ChatBodyError
from inferq.ingest.validation import SubmitRequest
from inferq.messaging import limits
from inferq.messaging.tiers import Tier

HEADER_SCENARIO = "x-inferq-scenario"
HEADER_PRIORITY = "x-inferq-priority"
HEADER_DEADLINE = "x-inferq-deadline-ms"
META_SCENARIO = "inferq_scenario"
META_PRIORITY = "inferq_priority"
META_DEADLINE = "inferq_deadline_ms"

T = TypeVar("T")


@dataclass
class Routing:
    """The scenario, tier and deadline a request asked for (None: the default), unchecked, and
    where each came from (`sources`: an ingest field to the header or metadata key that gave it)."""

    scenario: str | None
    priority: str | None
    deadline_ms: int | None
    sources: dict[str, str] = field(default_factory=dict)

    def scenario_checked(self, checks: FieldChecks, default_scenario: str) -> str:
        """The scenario (or `default_scenario`) by `SubmitRequest`'s rule, a problem noted in `checks`."""
        scenario: str = checks.check(
            ("scenario",), field_rule(SubmitRequest, "scenario"), self.scenario or default_scenario
        )
        return scenario

    def deadline_and_tier_checked(self, checks: FieldChecks) -> tuple[int | None, Tier | None]:
        """The deadline and tier by `SubmitRequest`'s rules (checked after the scenario and, for a
        chat, its messages and model: the native API's order), problems noted in `checks`."""
        deadline_ms = checks.check(
            ("deadline_ms",), field_rule(SubmitRequest, "deadline_ms"), self.deadline_ms
        )
        tier = checks.check(("priority",), field_rule(SubmitRequest, "priority"), self.priority)
        return deadline_ms, tier


def asked_routing(headers: Headers, metadata: Mapping[str, str] | None = None) -> Routing:
    """What `headers` (and `metadata`) ask for; `ChatBodyError` (400) for a header given twice, a
    header and a metadata key that disagree, or a deadline that is not a whole number of ms."""
    sources: dict[str, str] = {}
    scenario = _asked(headers, metadata, HEADER_SCENARIO, META_SCENARIO, "scenario", sources)
    priority = _asked(headers, metadata, HEADER_PRIORITY, META_PRIORITY, "priority", sources)
    if priority is not None and priority.isascii():
        priority = priority.upper()
    deadline = _asked(headers, metadata, HEADER_DEADLINE, META_DEADLINE, "deadline_ms", sources)
    if deadline is not None and not (deadline.isascii() and deadline.isdigit() and len(deadline) <= 12):
        raise ChatBodyError(
            f"must be a whole number of milliseconds, 1 to {limits.MAX_DEADLINE_MS}",
            param=sources["deadline_ms"],
        )
    return Routing(scenario, priority, None if deadline is None else int(deadline), sources)


def session_key(end_user: str | None) -> str | None:
    """The session key of an end user (OpenAI's `user`, `safety_identifier`), as a hash: one end
    user's requests stay in order, and the name itself is not what the record keys on."""
    if not end_user:
        return None
    return "u-" + hashlib.sha256(end_user.encode("utf-8", "surrogatepass")).hexdigest()[:40]


class FieldChecks:
    """Values checked one by one by ingest's field rules; the problems of all of them collected."""

    def __init__(self) -> None:
        self.problems: list[ErrorDetails] = []

    def check(self, loc: tuple[str | int, ...], rule: TypeAdapter[T], value: Any) -> T:
        """`value` as `rule` takes it; a problem (its place `loc`) noted, and `value` given back as
        it is: it is used only when no problem was noted."""
        try:
            return rule.validate_python(value)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            self.problems.extend(cast(ErrorDetails, {**e, "loc": (*loc, *e["loc"])}) for e in errors)
            return cast(T, value)


@functools.cache
def field_rule(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    """The type and bounds of `model`'s field `name`, as a validator of one value."""
    found = model.model_fields[name]
    # Built at run time from the field, so typed as Any: the adapter's own type says nothing more.
    rule: Any = Annotated[found.annotation, *found.metadata] if found.metadata else found.annotation
    return TypeAdapter(rule)


def _asked(
    headers: Headers,
    metadata: Mapping[str, str] | None,
    header: str,
    key: str,
    name: str,
    sources: dict[str, str],
) -> str | None:
    values = headers.getlist(header)
    if len(values) > 1:
        raise ChatBodyError(f"header {header} given {len(values)} times", param=header)
    from_meta = (metadata or {}).get(key)
    if values and from_meta is not None and values[0] != from_meta:
        raise ChatBodyError(f"header {header} and metadata.{key} disagree; give one", param=header)
    if values:
        sources[name] = header
        return values[0]
    if from_meta is not None:
        sources[name] = f"metadata.{key}"
    return from_meta
