"""What every record ingest writes must satisfy: it decodes with the codec, and each field keeps the
bounds of `inferq.messaging.limits` (the table the dispatcher trusts for records from ingest)."""

from __future__ import annotations

import json

from inferq.messaging import embedding_rules, limits, param_rules, tool_rules
from inferq.messaging.codec import request_codec
from inferq.messaging.records import InferenceRequest
from inferq.messaging.reply_topics import is_allowed_reply_topic
from inferq.messaging.topics import TopicNames


def broken_rules(value: bytes, key: bytes | None, topics: TopicNames) -> list[str]:
    """Every rule the record `value` (keyed `key`) breaks; empty when it keeps them all."""
    request: InferenceRequest = request_codec().decode(value)
    # Round trip: what decodes encodes to the same bytes.
    problems = [] if request_codec().encode(request) == value else ["does not round-trip"]

    def check(ok: bool, rule: str) -> None:
        if not ok:
            problems.append(rule)

    def identifier(text: str | None, max_chars: int, name: str) -> None:
        if text is not None:
            check(len(text) <= max_chars and limits.ID_PATTERN.fullmatch(text) is not None, f"{name} shape")

    identifier(request.request_id, limits.MAX_ID_CHARS, "request_id")
    identifier(request.session_id, limits.MAX_ID_CHARS, "session_id")
    identifier(request.scenario, limits.MAX_SCENARIO_CHARS, "scenario")
    identifier(request.tenant, limits.MAX_TENANT_CHARS, "tenant")
    identifier(request.model, limits.MAX_MODEL_CHARS, "model")
    if request.embedding_input is not None:
        # An embedding: its texts instead of messages, within `embedding_rules` (its result's size too).
        check(request.messages == (), "an embedding has no messages")
        problem = embedding_rules.request_problem(request.embedding_input, request.embedding_dimensions)
        check(problem is None, "embedding bounds")
    else:
        check(0 < len(request.messages) <= limits.MAX_MESSAGES, "message count")
    check(all(len(m.content) <= limits.MAX_MESSAGE_CHARS for m in request.messages), "message length")
    check(request.attempt == 1 and request.not_before_ms is None, "a first attempt")
    check(0 < request.expire_at_ms - request.created_at_ms <= limits.MAX_DEADLINE_MS, "deadline bound")
    check(request.expire_at_ms <= limits.AVRO_LONG_MAX, "expire_at_ms is a long")
    if request.estimated_tokens is not None:
        check(0 <= request.estimated_tokens <= limits.MAX_ESTIMATED_TOKENS, "estimated_tokens bound")
    if request.reply_to is not None:
        check(is_allowed_reply_topic(request.reply_to, topics), "reply_to allowed")
    params = request.decoded_params()
    if "n" in params:
        check(1 < params["n"] <= limits.MAX_CHOICES, "n bound (1, the default, not written)")
    if "top_logprobs" in params:
        check(0 <= params["top_logprobs"] <= limits.MAX_TOP_LOGPROBS, "top_logprobs bound")
        check(params.get("logprobs") is True, "top_logprobs only with logprobs true")
    check(params.get("logprobs", True) is True, "logprobs true (false, the default, not written)")
    # Ingest writes a pass-through key only for a tenant that lists it, within its own bounds.
    passed = {name for name in params if name not in limits.ALLOWED_PARAMS}
    check(all(param_rules.passthrough_name_ok(name) for name in passed), "params allow-list")
    check(len(passed) <= limits.MAX_PASSTHROUGH_PARAMS, "pass-through count")
    check(all(param_rules.passthrough_problem(n, params[n]) is None for n in passed), "pass-through bounds")
    for name in param_rules.RULES:
        if name in params:
            check(param_rules.params_problem(name, params[name]) is None, f"{name} bounds")
    check(
        param_rules.max_tokens_conflict(params.get("max_tokens"), params.get("max_completion_tokens"))
        is None,
        "one limit",
    )
    check(not {"model", "messages", "stream"} & set(params), "no model, messages or stream")
    if "temperature" in params:
        check(0 <= params["temperature"] <= limits.MAX_TEMPERATURE, "temperature bound")
    if "top_p" in params:
        check(0 <= params["top_p"] <= limits.MAX_TOP_P, "top_p bound")
    if "max_tokens" in params:
        check(1 <= params["max_tokens"] <= limits.MAX_COMPLETION_TOKENS, "max_tokens bound")
    for name in ("presence_penalty", "frequency_penalty"):
        if name in params:
            check(abs(params[name]) <= limits.MAX_PENALTY, f"{name} bound")
    if "stop" in params:
        stop = params["stop"] if isinstance(params["stop"], list) else [params["stop"]]
        check(len(stop) <= limits.MAX_STOP_SEQUENCES, "stop count")
        check(all(isinstance(s, str) and 0 < len(s) <= limits.MAX_STOP_CHARS for s in stop), "stop length")
    for name in ("response_format", "tools", "tool_choice", "parallel_tool_calls"):
        if name in params:
            check(tool_rules.params_problem(name, params[name]) is None, f"{name} bounds")
    check("tool_choice" not in params or "tools" in params, "tool_choice only with tools")
    for m in request.messages:
        check((m.tool_call_id is not None) == (m.role == "tool"), "tool_call_id exactly on tool messages")
        if m.tool_calls is not None:
            check(m.role == "assistant", "tool_calls only on assistant messages")
            check(tool_rules.tool_calls_problem(json.loads(m.tool_calls)) is None, "tool_calls bounds")
    # Every string must be UTF-8 (the codec would have failed otherwise) and valid JSON where JSON.
    check(all(json.dumps(v) for v in params.values()), "params are JSON")
    check(key == (request.session_id or request.request_id).encode(), "key is the session or the id")
    return problems
