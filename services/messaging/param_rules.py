"""The bounds of the chat-completions parameters besides sampling and function calling, on decoded
JSON values: `logit_bias`, `user`, `metadata`, `max_completion_tokens`, `reasoning_effort`,
`modalities`, `store`, `safety_identifier`, `prompt_cache_key`, `prompt_cache_retention`,
`prompt_cache_options`, `service_tier`, `verbosity`, `prediction`, `web_search_options`,
`moderation`, and the pass-through of fields added to the API later.

Ingest (``POST /v1/requests``'s `ChatParams`, ``POST /v1/chat/completions``) and the dispatcher (a
record written straight to Kafka) apply the same functions, as `tool_rules` does for tools. Each
returns None for a value within bounds, else one problem in words, its place first
(``logit_bias: at most 300 tokens, not 301``); none raises on hostile input.

Only what inferq must trust is checked (types, sizes, the enumerations of the installed SDK); what a
value means is the backend's to judge (its 400 is passed back to the caller).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferq.messaging import limits
from inferq.messaging.tool_rules import json_bytes, json_depth

AUDIO_REFUSED = 'modalities: inferq answers text only: audio output is not supported (give ["text"])'


def _text(where: str, value: Any, most: int, least: int = 1) -> str | None:
    if not isinstance(value, str) or not least <= len(value) <= most:
        return f"{where}: must be text of {least} to {most} characters"
    return None


def _one_of(where: str, value: Any, allowed: frozenset[str]) -> str | None:
    if not isinstance(value, str) or value not in allowed:
        return f"{where}: must be one of {', '.join(sorted(allowed))}"
    return None


def _object(where: str, value: Any, keys: frozenset[str]) -> str | None:
    """The problem of `value` when it is not an object whose keys are among `keys`."""
    if not isinstance(value, dict):
        return f"{where}: must be an object"
    unknown = sorted(str(k)[:32] for k in value if k not in keys)
    if unknown:
        return f"{where}: unknown field {unknown[0]} (known: {', '.join(sorted(keys))})"
    return None


def logit_bias_problem(value: Any) -> str | None:
    """At most `MAX_LOGIT_BIAS_TOKENS` token ids (decimal text) each mapped to an integer bias."""
    if not isinstance(value, dict):
        return "logit_bias: must be an object of token ids to biases"
    if len(value) > limits.MAX_LOGIT_BIAS_TOKENS:
        return f"logit_bias: at most {limits.MAX_LOGIT_BIAS_TOKENS} tokens, not {len(value)}"
    most = limits.MAX_LOGIT_BIAS
    for token, bias in value.items():
        if not isinstance(token, str) or not limits.LOGIT_BIAS_TOKEN_PATTERN.fullmatch(token):
            return "logit_bias: a key must be a token id (1-10 decimal digits)"
        if isinstance(bias, bool) or not isinstance(bias, int) or not -most <= bias <= most:
            return f"logit_bias.{token}: must be an integer from -{most} to {most}"
    return None


def metadata_problem(value: Any) -> str | None:
    """OpenAI's bounds (16 pairs of short texts), without inferq's own `inferq_*` keys."""
    if not isinstance(value, dict):
        return "metadata: must be an object of texts"
    if len(value) > limits.MAX_METADATA_PAIRS:
        return f"metadata: at most {limits.MAX_METADATA_PAIRS} pairs, not {len(value)}"
    for key, text in value.items():
        if not isinstance(key, str) or not 1 <= len(key) <= limits.MAX_METADATA_KEY_CHARS:
            return f"metadata: a key must be 1 to {limits.MAX_METADATA_KEY_CHARS} characters"
        if key.startswith(limits.INFERQ_METADATA_PREFIX):
            return f"metadata.{key}: {limits.INFERQ_METADATA_PREFIX}* keys are inferq's own, never forwarded"
        if not isinstance(text, str) or len(text) > limits.MAX_METADATA_VALUE_CHARS:
            return f"metadata.{key}: must be text of at most {limits.MAX_METADATA_VALUE_CHARS} characters"
    return None


def max_completion_tokens_problem(value: Any) -> str | None:
    most = limits.MAX_COMPLETION_TOKENS
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        return f"max_completion_tokens: must be an integer from 1 to {most}"
    return None


def max_tokens_conflict(max_tokens: Any, max_completion_tokens: Any) -> str | None:
    """The problem of a request giving both limits with different values (neither silently wins)."""
    if max_tokens is None or max_completion_tokens is None or max_tokens == max_completion_tokens:
        return None
    return "give max_tokens or max_completion_tokens, not two different values"


def modalities_problem(value: Any) -> str | None:
    """``["text"]`` only; audio is refused by name."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        return 'modalities: must be a list of output modalities (["text"])'
    if "audio" in value:
        return AUDIO_REFUSED
    if len(value) > 1 or value[0] not in limits.MODALITIES:
        return 'modalities: must be ["text"]'
    return None


def store_problem(value: Any) -> str | None:
    return None if isinstance(value, bool) else "store: must be true or false"


def prediction_problem(value: Any) -> str | None:
    """``{"type": "content", "content": text or text parts}``, at most `MAX_PREDICTION_CHARS` of text."""
    problem = _object("prediction", value, frozenset({"type", "content"}))
    if problem is not None:
        return problem
    if value.get("type") != "content":
        return 'prediction.type: must be "content"'
    content = value.get("content")
    if isinstance(content, list):
        if not 1 <= len(content) <= limits.MAX_PREDICTION_PARTS:
            return f"prediction.content: 1 to {limits.MAX_PREDICTION_PARTS} text parts"
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or set(part) != {"type", "text"} or part["type"] != "text":
                return f'prediction.content[{i}]: must be {{"type": "text", "text": ...}}'
            texts.append(part["text"])
    else:
        texts = [content]
    if not all(isinstance(t, str) for t in texts):
        return "prediction.content: must be text"
    if sum(len(t) for t in texts) > limits.MAX_PREDICTION_CHARS:
        return f"prediction.content: over {limits.MAX_PREDICTION_CHARS} characters"
    return None


_LOCATION_FIELDS = frozenset({"city", "country", "region", "timezone"})


def web_search_options_problem(value: Any) -> str | None:
    """``search_context_size`` and an approximate ``user_location`` of four short texts."""
    problem = _object("web_search_options", value, frozenset({"search_context_size", "user_location"}))
    if problem is None and "search_context_size" in value:
        size = value["search_context_size"]
        problem = _one_of("web_search_options.search_context_size", size, limits.SEARCH_CONTEXT_SIZES)
    location = value.get("user_location") if problem is None else None
    if location is None:
        return problem
    where = "web_search_options.user_location"
    problem = _object(where, location, frozenset({"type", "approximate"}))
    if problem is not None:
        return problem
    if location.get("type") != "approximate":
        return f'{where}.type: must be "approximate"'
    approximate = location.get("approximate")
    problem = _object(f"{where}.approximate", approximate, _LOCATION_FIELDS)
    if problem is not None:
        return problem
    for name, text in approximate.items():
        problem = _text(f"{where}.approximate.{name}", text, limits.MAX_OPTION_TEXT_CHARS)
        if problem is not None:
            return problem
    return None


def moderation_problem(value: Any) -> str | None:
    """A moderation ``model`` and an optional ``policy`` of an input and an output mode."""
    problem = _object("moderation", value, frozenset({"model", "policy"}))
    if problem is None:
        problem = _text("moderation.model", value.get("model"), limits.MAX_MODEL_CHARS)
    policy = value.get("policy") if problem is None else None
    if policy is None:
        return problem
    problem = _object("moderation.policy", policy, frozenset({"input", "output"}))
    for side in ("input", "output"):
        mode = policy.get(side) if problem is None else None
        if mode is not None:
            where = f"moderation.policy.{side}"
            problem = _object(where, mode, frozenset({"mode"})) or _one_of(
                f"{where}.mode", mode.get("mode"), frozenset({"score", "block"})
            )
    return problem


def prompt_cache_options_problem(value: Any) -> str | None:
    problem = _object("prompt_cache_options", value, frozenset({"mode", "ttl"}))
    if problem is None and "mode" in value:
        problem = _one_of("prompt_cache_options.mode", value["mode"], frozenset({"implicit", "explicit"}))
    if problem is None and "ttl" in value:
        problem = _text("prompt_cache_options.ttl", value["ttl"], 16)
    return problem


def passthrough_name_ok(name: str) -> bool:
    """Whether `name` may name a pass-through field (a plain identifier inferq does not reserve)."""
    return bool(limits.PASSTHROUGH_NAME_PATTERN.fullmatch(name)) and name not in limits.NOT_PASSTHROUGH


def passthrough_problem(name: str, value: Any) -> str | None:
    """A pass-through field's value: any JSON value of at most `MAX_PASSTHROUGH_BYTES` (compact
    UTF-8) nesting at most `MAX_PASSTHROUGH_DEPTH` levels."""
    if json_depth(value) > limits.MAX_PASSTHROUGH_DEPTH:
        return f"{name}: nests deeper than {limits.MAX_PASSTHROUGH_DEPTH} levels"
    if json_bytes(value) > limits.MAX_PASSTHROUGH_BYTES:
        return f"{name}: over {limits.MAX_PASSTHROUGH_BYTES} bytes"
    return None


def _text_rule(name: str) -> Callable[[Any], str | None]:
    # Empty is allowed: OpenAI takes "" (no end user named).
    return lambda value: _text(name, value, limits.MAX_END_USER_CHARS, least=0)


def _one_of_rule(name: str, allowed: frozenset[str]) -> Callable[[Any], str | None]:
    return lambda value: _one_of(name, value, allowed)


RULES: dict[str, Callable[[Any], str | None]] = {
    "logit_bias": logit_bias_problem,
    "user": _text_rule("user"),
    "metadata": metadata_problem,
    "max_completion_tokens": max_completion_tokens_problem,
    "reasoning_effort": _one_of_rule("reasoning_effort", limits.REASONING_EFFORTS),
    "modalities": modalities_problem,
    "store": store_problem,
    "safety_identifier": _text_rule("safety_identifier"),
    "prompt_cache_key": _text_rule("prompt_cache_key"),
    "prompt_cache_retention": _one_of_rule("prompt_cache_retention", limits.PROMPT_CACHE_RETENTIONS),
    "prompt_cache_options": prompt_cache_options_problem,
    "service_tier": _one_of_rule("service_tier", limits.SERVICE_TIERS),
    "verbosity": _one_of_rule("verbosity", limits.VERBOSITIES),
    "prediction": prediction_problem,
    "web_search_options": web_search_options_problem,
    "moderation": moderation_problem,
}


def params_problem(name: str, value: Any) -> str | None:
    """The problem of one of this module's parameters (None for another parameter's name)."""
    rule = RULES.get(name)
    return None if rule is None else rule(value)
