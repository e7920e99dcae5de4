"""What the dispatcher does not take on trust in a request read from Kafka.

Anyone who can write to a topic can write any field (architecture: "Producers may write to Kafka
directly"), so every decoded request passes these rules before it is queued, with the bounds of
``services/messaging/limits.py`` (ingest refuses the same with 422). Three outcomes:

- **poison** (`DecodeError`): a `request_id` that is not an id (there is no caller to answer), and,
  as before these rules, a request with no messages or with `params` values that are not JSON
  (nothing a caller could have meant). The record goes to the dead-letter topic alone, like bytes
  that do not decode.
- **clamped**, and the request runs: values whose honest meaning is clear, only out of range.
  `created_at_ms` in the future beyond `MAX_CLOCK_SKEW_MS` → now (a wrong clock), older than
  `MAX_DEADLINE_MS` → that bound; on a request topic whose broker stamps the append time
  (`appended_ms`, LogAppendTime), `created_at_ms` is bounded by it first: later than it by more
  than `MAX_CLOCK_SKEW_MS` → the append time, earlier than it by more than `max_append_lag_ms`
  (a producer's buffering, a mirror's lag) → that bound, so a backdated request cannot jump the
  aging queue nor a future one stretch its deadline (clamped, never refused: a mirrored record
  late by an outage still runs); `expire_at_ms` → at most `MAX_DEADLINE_MS` after creation;
  `attempt` below 1 → 1; `estimated_tokens` → 0..`MAX_ESTIMATED_TOKENS` (negative → unknown);
  `not_before_ms` of a retry → at most `max_backoff` from when it is first read (`due_ms`, with intake
  remembering the clamp so it is not pushed back on every read); the tier (below). Each is counted
  in ``inferq_clamped_fields_total{field}``.
- **refused** (`RefusedRequestError`): the request must not reach the LLM as written. It goes to the
  dead-letter topic with the reason and its caller gets FAILED. Refused: a `reply_to` that is not
  one of the pipeline's reply topics (``services/messaging/reply_topics.py``, ingest's rule; its
  FAILED result then goes to the default results topic); `attempt` above `max_attempts` (retries
  exhausted, whoever wrote it); identifiers (session, tenant, scenario, model) that are not 1..n
  characters of the id pattern, as ingest refuses them, and a region over its length; too many
  messages, a role the chat API does not know, content too long, function-calling fields out of
  `tool_rules`' bounds (a `tool` message without its `tool_call_id`, `tool_calls` that are not
  JSON, too many, too deep); `params` with a key off the allow-list (the reserved `model`,
  `messages`, `stream` included) or a value out of ingest's `ChatParams` bounds (for `tools`,
  `tool_choice`, `parallel_tool_calls` and `response_format`, `tool_rules`'; `top_logprobs`
  without `logprobs` true).

An embedding request (`embedding_input` set) has no messages: its texts and `dimensions` obey
`embedding_rules` (how many texts, how long each, the dimensions, the bytes of the vectors asked
for), as ingest refuses them with 400. No texts at all is poison (nothing a caller could have
meant, as no messages); a record with both texts and messages, `params` or `stream` is refused
(neither API writes one), and so are texts or dimensions out of bounds.

Params: refused rather than the key dropped. Dropping would run a different request than the one
asked for (and bill it), silently; a refusal says which key, and ingest refuses the same key with
422 before it is ever written.

Tier: on a request topic the topic is the tier (the record's own field is ignored). On the retry
topic the record's tier is believed only as far as the scenario's rules go (`TierPolicy`, as ingest
applies them): a retry claiming a higher tier than its scenario's is served at the scenario's tier;
a lower claim is kept, raised to the scenario's floor. The cost: a request raised explicitly by its
caller ("express") is retried at its scenario's tier, because a record on the retry topic cannot
prove that raise was granted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from inferq.dispatcher.errors import RefusedRequestError
from inferq.messaging import embedding_rules, limits, param_rules, tool_rules
from inferq.messaging.errors import DecodeError
from inferq.messaging.records import ChatMessage, InferenceRequest
from inferq.messaging.reply_topics import is_allowed_reply_topic
from inferq.messaging.tiers import Tier, TierPolicy
from inferq.messaging.topics import TopicNames

# How much of a hostile value a reason shows.
SHOWN_CHARS = 40


def shown(value: object) -> str:
    """A value fit for a reason: repr (escapes control characters), cut to `SHOWN_CHARS`."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


@dataclass(frozen=True)
class Checked:
    """A request that may run: its fields clamped, its tier, its decoded parameters, its reply topic
    (None: the default results topic) and the names of the fields that were clamped."""

    request: InferenceRequest
    tier: Tier
    params: dict[str, Any]
    reply_topic: str | None
    clamped: tuple[str, ...]


@dataclass(frozen=True)
class RecordRules:
    topics: TopicNames
    max_attempts: int
    max_backoff_ms: int
    tier_policy: TierPolicy = field(default_factory=TierPolicy)
    max_append_lag_ms: int = limits.MAX_APPEND_LAG_MS

    def check(
        self,
        request: InferenceRequest,
        *,
        source_topic: str,
        now_ms: int,
        raw_size: int = 0,
        appended_ms: int | None = None,
    ) -> Checked:
        """The request as it may run; `DecodeError` for poison, `RefusedRequestError` for a refusal.
        `appended_ms`: when the broker appended the record (LogAppendTime), or None."""
        # fullmatch: the pattern's `$` would let a trailing newline through with `match`.
        if not limits.ID_PATTERN.fullmatch(request.request_id):
            raise DecodeError(f"request_id {shown(request.request_id)} is not an id", raw_size=raw_size)
        if request.embedding_input is not None and not request.embedding_input:
            raise DecodeError("embedding_input is empty: nothing to send to the LLM", raw_size=raw_size)
        if not request.messages and request.embedding_input is None:
            raise DecodeError("messages is empty: nothing to send to the LLM", raw_size=raw_size)
        values, too_large = _json_values(request.params, raw_size)
        request, tier, clamped = self._clamped(request, source_topic, now_ms, appended_ms)
        reply = request.reply_to
        if reply is not None and not is_allowed_reply_topic(reply, self.topics):
            raise RefusedRequestError(
                f"reply_to {shown(reply)} is not a results topic of this pipeline",
                request=request,
                tier=tier,
                reply_topic=None,
            )

        def refused(reason: str) -> RefusedRequestError:
            return RefusedRequestError(reason, request=request, tier=tier, reply_topic=reply)

        if request.attempt > self.max_attempts:
            raise RefusedRequestError(
                f"attempt {request.attempt} is beyond the {self.max_attempts} allowed: exhausted",
                request=replace(request, attempt=self.max_attempts),
                tier=tier,
                reply_topic=reply,
            )
        problem = _string_problem(request) or _messages_problem(request) or _embedding_problem(request)
        if problem is not None:
            raise refused(problem)
        params, problem = _params(values)
        problem = too_large or problem
        if problem is not None:
            raise refused(problem)
        return Checked(request, tier, params, reply, clamped)

    def due_ms(self, not_before_ms: int | None, now_ms: int) -> int:
        """When a retry record may run: its `not_before_ms`, at most `max_backoff_ms` from now."""
        return min(not_before_ms or 0, now_ms + self.max_backoff_ms)

    def _clamped(
        self, request: InferenceRequest, source_topic: str, now_ms: int, appended_ms: int | None
    ) -> tuple[InferenceRequest, Tier, tuple[str, ...]]:
        changes: dict[str, Any] = {}
        created = request.created_at_ms
        if appended_ms is not None:
            if created > appended_ms + limits.MAX_CLOCK_SKEW_MS:
                created = appended_ms  # made after the broker had it: as new as the broker says
            elif created < appended_ms - self.max_append_lag_ms:
                created = appended_ms - self.max_append_lag_ms  # backdated, or held up that long
        if created > now_ms + limits.MAX_CLOCK_SKEW_MS:
            created = now_ms  # a clock that far ahead is wrong: the request is as new as it gets
        elif created < now_ms - limits.MAX_DEADLINE_MS:
            created = now_ms - limits.MAX_DEADLINE_MS  # older than anything still owed
        if created != request.created_at_ms:
            changes["created_at_ms"] = created
        if request.expire_at_ms > created + limits.MAX_DEADLINE_MS:
            changes["expire_at_ms"] = created + limits.MAX_DEADLINE_MS
        if request.attempt < 1:
            changes["attempt"] = 1
        tokens = request.estimated_tokens
        if tokens is not None and not 0 <= tokens <= limits.MAX_ESTIMATED_TOKENS:
            changes["estimated_tokens"] = None if tokens < 0 else limits.MAX_ESTIMATED_TOKENS
        tier = self._tier(request, source_topic)
        if tier != request.tier:
            changes["tier"] = tier
        return (replace(request, **changes) if changes else request), tier, tuple(changes)

    def _tier(self, request: InferenceRequest, source_topic: str) -> Tier:
        topic_tier = self.topics.tier_of(source_topic)
        if topic_tier is not None:
            return topic_tier
        by_scenario = self.tier_policy.tier_for(request.scenario)
        if request.tier.rank < by_scenario.rank:
            return by_scenario  # a claim above the scenario's tier is not obeyed
        return self.tier_policy.tier_for(request.scenario, explicit=request.tier)


# Identifiers, as ingest's (1..bound characters of `limits.ID_PATTERN`); the region, which ingest
# sets itself, by length only.
_IDENTIFIERS = (
    ("session_id", limits.MAX_ID_CHARS),
    ("tenant", limits.MAX_TENANT_CHARS),
    ("scenario", limits.MAX_SCENARIO_CHARS),
    ("model", limits.MAX_MODEL_CHARS),
)


def _string_problem(request: InferenceRequest) -> str | None:
    for name, most in _IDENTIFIERS:
        value: str | None = getattr(request, name)
        if value is not None and (len(value) > most or not limits.ID_PATTERN.fullmatch(value)):
            return f"{name} must be 1-{most} characters of letters, digits, '.', '_', ':' or '-'"
    region = request.origin_region
    if not 1 <= len(region) <= limits.MAX_ORIGIN_REGION_CHARS:
        return f"origin_region must be 1-{limits.MAX_ORIGIN_REGION_CHARS} characters, not {len(region)}"
    # Only its length here: the results service applies the webhook rules (hosts, SSRF guard) at
    # delivery, where the tenant's current entitlements are.
    url = request.callback_url
    if url is not None and not 1 <= len(url) <= limits.MAX_CALLBACK_URL_CHARS:
        return f"callback_url must be 1-{limits.MAX_CALLBACK_URL_CHARS} characters, not {len(url)}"
    return None


def _messages_problem(request: InferenceRequest) -> str | None:
    messages = request.messages
    if len(messages) > limits.MAX_MESSAGES:
        return f"messages must be at most {limits.MAX_MESSAGES}, not {len(messages)}"
    for index, message in enumerate(messages):
        if message.role not in limits.MESSAGE_ROLES:
            return f"messages[{index}].role is not a chat role"  # its value may be anything, a prompt too
        if len(message.content) > limits.MAX_MESSAGE_CHARS:
            return f"messages[{index}].content is over {limits.MAX_MESSAGE_CHARS} characters"
        problem = _tool_fields_problem(message)
        if problem is not None:
            return f"messages[{index}].{problem}"
    return None


def _embedding_problem(request: InferenceRequest) -> str | None:
    """`embedding_rules`' bounds of an embedding request, which carries nothing else for the backend."""
    texts, dimensions = request.embedding_input, request.embedding_dimensions
    if texts is None:
        return None if dimensions is None else "embedding_dimensions is only allowed with embedding_input"
    if request.messages or request.params or request.stream:
        return "an embedding request carries no messages, params or stream"
    problem = embedding_rules.request_problem(texts, dimensions)
    return None if problem is None else f"embedding request: {problem}"


def _tool_fields_problem(message: ChatMessage) -> str | None:
    """Ingest's `Message` rules for the function-calling fields (`tool_rules`' bounds)."""
    name = message.name
    if name is not None and not 1 <= len(name) <= limits.MAX_MESSAGE_NAME_CHARS:
        return f"name must be 1-{limits.MAX_MESSAGE_NAME_CHARS} characters"
    if (message.tool_call_id is not None) != (message.role == "tool"):
        return "tool_call_id is required on a tool message, and only there"
    if message.tool_call_id is not None:
        return tool_rules.tool_call_id_problem(message.tool_call_id)
    if message.tool_calls is None:
        return None
    if message.role != "assistant":
        return "tool_calls is only allowed on an assistant message"
    if len(message.tool_calls) > limits.MAX_TOOL_CALLS_CHARS:
        return f"tool_calls is over {limits.MAX_TOOL_CALLS_CHARS} characters"
    try:
        calls = json.loads(message.tool_calls)
    except (ValueError, RecursionError):
        return "tool_calls is not JSON"
    return tool_rules.tool_calls_problem(calls)


def _json_values(params: Mapping[str, str] | None, raw_size: int) -> tuple[dict[str, Any], str | None]:
    """The parameters' values JSON-decoded, or (when there are too many, or one too long to decode)
    the problem to refuse the request for; `DecodeError` for a value that is not JSON."""
    if not params:
        return {}, None
    if len(params) > limits.MAX_PARAMS:
        return {}, f"params has {len(params)} keys, at most {limits.MAX_PARAMS} are known"
    values: dict[str, Any] = {}
    for name, encoded in params.items():
        if name in limits.ALLOWED_PARAMS:
            most = limits.MAX_PARAM_CHARS_OF.get(name, limits.MAX_PARAM_CHARS)
        else:
            most = limits.MAX_PASSTHROUGH_CHARS
        if len(encoded) > most:
            return {}, f"a params value is over {most} characters"
        try:
            values[name] = json.loads(encoded)
        # Deep brackets make `json.loads` recurse until it gives up: not JSON a caller could mean.
        except (ValueError, RecursionError) as exc:
            raise DecodeError("params is not a map of JSON values", raw_size=raw_size) from exc
    return values, None


def _params(values: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The parameters a request may pass to the backend, or the first problem with them."""
    for name, value in values.items():
        if name in limits.RESERVED_PARAMS:
            return {}, f"params.{name} is set by the dispatcher, not by a request"
        if name not in limits.ALLOWED_PARAMS:
            if not param_rules.passthrough_name_ok(name):
                return {}, f"params.{shown(name)[1:-1]} is not a supported parameter"
            problem = param_rules.passthrough_problem(name, value)
        else:
            problem = tool_rules.params_problem(name, value) or param_rules.params_problem(name, value)
        if problem is not None:
            return {}, f"params.{problem}"
        if not _param_ok(name, value):
            return {}, f"params.{name} is out of its bounds"
    if "tool_choice" in values and "tools" not in values:
        return {}, "params.tool_choice is only allowed with params.tools"
    if "top_logprobs" in values and values.get("logprobs") is not True:
        return {}, "params.top_logprobs is only allowed with params.logprobs true"
    problem = param_rules.max_tokens_conflict(values.get("max_tokens"), values.get("max_completion_tokens"))
    if problem is not None:
        return {}, f"params: {problem}"
    if sum(name not in limits.ALLOWED_PARAMS for name in values) > limits.MAX_PASSTHROUGH_PARAMS:
        return {}, f"params: at most {limits.MAX_PASSTHROUGH_PARAMS} pass-through fields"
    return dict(values), None


def _number(value: Any, low: float, high: float) -> bool:
    # As ingest's strict floats: an int is a number, a bool is not; NaN and infinities fail the bounds.
    return isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high


def _integer(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _stop_text(value: Any) -> bool:
    return isinstance(value, str) and 1 <= len(value) <= limits.MAX_STOP_CHARS


def _param_ok(name: str, value: Any) -> bool:
    """The bounds of ingest's `ChatParams` (services/ingest/validation.py), on a decoded JSON value."""
    if name == "temperature":
        return _number(value, 0.0, limits.MAX_TEMPERATURE)
    if name == "top_p":
        return _number(value, 0.0, limits.MAX_TOP_P)
    if name in ("presence_penalty", "frequency_penalty"):
        return _number(value, -limits.MAX_PENALTY, limits.MAX_PENALTY)
    if name == "max_tokens":
        return _integer(value, 1, limits.MAX_COMPLETION_TOKENS)
    if name == "seed":
        return _integer(value, -limits.AVRO_LONG_MAX - 1, limits.AVRO_LONG_MAX)
    if name == "n":
        return _integer(value, 1, limits.MAX_CHOICES)
    if name == "top_logprobs":
        return _integer(value, 0, limits.MAX_TOP_LOGPROBS)
    if name == "logprobs":
        return isinstance(value, bool)
    if name != "stop":
        return True  # `tool_rules`, `param_rules` or the pass-through bounds have checked it
    # "stop": one string or a short list of them.
    if isinstance(value, list):
        return 1 <= len(value) <= limits.MAX_STOP_SEQUENCES and all(_stop_text(v) for v in value)
    return _stop_text(value)
