"""The bounds of function calling and structured output, on decoded JSON values: one rule for each of
`tools`, `tool_choice`, `parallel_tool_calls`, `response_format` and a message's `tool_calls`.

Ingest (``POST /v1/requests`` and ``POST /v1/chat/completions``, a 400/422 naming the problem) and
the dispatcher (a record written straight to Kafka, refused to the dead-letter topic) apply the same
functions, with the bounds of `inferq.messaging.limits`, so both say the same about the same value.
Each function returns None for a value within bounds, else one problem in words, its place first
(``tools[3].function.parameters: over 16384 bytes``). Nothing here raises on hostile input: the
depth is measured without recursion, sizes on compact JSON.

Only the shape inferq must trust is checked (names, sizes, depth, types); what a schema says is the
backend's to judge (a backend that refuses a schema answers 400, passed back to the caller).
"""

from __future__ import annotations

import json
import re
from typing import Any

from inferq.messaging import limits

TOOL_CHOICE_MODES = frozenset({"none", "auto", "required"})
_DESCRIPTION_RULE = f"must be text of at most {limits.MAX_TOOL_DESCRIPTION_CHARS} characters"
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth(value: Any) -> int:
    """How deep `value` nests (a scalar 0, ``[]`` 1, ``[{}]`` 2), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth + 1)
            stack.extend((v, depth + 1) for v in item)
    return deepest


def json_bytes(value: Any) -> int:
    """The size of `value` as compact UTF-8 JSON."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _schema_problem(where: str, schema: Any, max_bytes: int) -> str | None:
    if not isinstance(schema, dict):
        return f"{where}: must be a JSON schema (an object)"
    if json_depth(schema) > limits.MAX_TOOL_JSON_DEPTH:
        return f"{where}: nests deeper than {limits.MAX_TOOL_JSON_DEPTH} levels"
    if json_bytes(schema) > max_bytes:
        return f"{where}: over {max_bytes} bytes"
    return None


def _name_problem(where: str, name: Any) -> str | None:
    if not isinstance(name, str) or not limits.TOOL_NAME_PATTERN.fullmatch(name):
        return f"{where}: must be 1-64 characters of letters, digits, '_' or '-'"
    return None


def tools_problem(value: Any) -> str | None:
    """`tools`: 1..`MAX_TOOLS` function definitions, each a name, an optional description, an
    optional `parameters` schema and an optional `strict`."""
    if not isinstance(value, list) or not value:
        return "tools: must be a non-empty list of tools"
    if len(value) > limits.MAX_TOOLS:
        return f"tools: at most {limits.MAX_TOOLS} tools, not {len(value)}"
    if json_depth(value) > limits.MAX_TOOL_JSON_DEPTH + 3:
        return f"tools: nests deeper than {limits.MAX_TOOL_JSON_DEPTH} levels"
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or set(tool) - {"type", "function"}:
            return f'{where}: must be {{"type": "function", "function": {{...}}}}'
        function = tool.get("function")
        if not isinstance(function, dict):
            return f"{where}.function: must be an object"
        unknown = set(function) - {"name", "description", "parameters", "strict"}
        if unknown:
            return f"{where}.function: unknown field {sorted(unknown)[0][:64]!r}"
        problem = _name_problem(f"{where}.function.name", function.get("name"))
        if problem:
            return problem
        problem = _description_problem(f"{where}.function.description", function.get("description"))
        if problem:
            return problem
        if "parameters" in function:
            problem = _schema_problem(
                f"{where}.function.parameters", function["parameters"], limits.MAX_TOOL_SCHEMA_BYTES
            )
            if problem:
                return problem
        if function.get("strict") is not None and not isinstance(function["strict"], bool):
            return f"{where}.function.strict: must be true or false"
    if json_bytes(value) > limits.MAX_TOOLS_BYTES:
        return f"tools: over {limits.MAX_TOOLS_BYTES} bytes in all"
    return None


def _description_problem(where: str, description: Any) -> str | None:
    """An optional description: text of at most `MAX_TOOL_DESCRIPTION_CHARS`."""
    if description is None or (
        isinstance(description, str) and len(description) <= limits.MAX_TOOL_DESCRIPTION_CHARS
    ):
        return None
    return f"{where}: {_DESCRIPTION_RULE}"


def tool_choice_problem(value: Any) -> str | None:
    """`tool_choice`: "none", "auto", "required" or one named function."""
    if isinstance(value, str):
        return (
            None
            if value in TOOL_CHOICE_MODES
            else 'tool_choice: must be "none", "auto", "required" or a function'
        )
    if isinstance(value, dict) and value.get("type") == "function" and set(value) == {"type", "function"}:
        function = value["function"]
        if isinstance(function, dict) and set(function) == {"name"}:
            return _name_problem("tool_choice.function.name", function["name"])
    return (
        'tool_choice: must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}'
    )


def parallel_tool_calls_problem(value: Any) -> str | None:
    return None if isinstance(value, bool) else "parallel_tool_calls: must be true or false"


def response_format_problem(value: Any) -> str | None:
    """`response_format`: {"type": "text"}, {"type": "json_object"} or {"type": "json_schema",
    "json_schema": {"name", "description"?, "schema"?, "strict"?}}."""
    if not isinstance(value, dict) or value.get("type") not in limits.RESPONSE_FORMATS:
        return "response_format.type: must be 'text', 'json_object' or 'json_schema'"
    if value["type"] != "json_schema":
        return None if set(value) == {"type"} else "response_format: only json_schema takes more than a type"
    spec = value.get("json_schema")
    if set(value) != {"type", "json_schema"} or not isinstance(spec, dict):
        return "response_format.json_schema: must be an object"
    unknown = set(spec) - {"name", "description", "schema", "strict"}
    if unknown:
        return f"response_format.json_schema: unknown field {sorted(unknown)[0][:64]!r}"
    problem = _name_problem("response_format.json_schema.name", spec.get("name"))
    if problem:
        return problem
    problem = _description_problem("response_format.json_schema.description", spec.get("description"))
    if problem:
        return problem
    if "schema" in spec:
        problem = _schema_problem(
            "response_format.json_schema.schema", spec["schema"], limits.MAX_RESPONSE_SCHEMA_BYTES
        )
        if problem:
            return problem
    if spec.get("strict") is not None and not isinstance(spec["strict"], bool):
        return "response_format.json_schema.strict: must be true or false"
    return None


def tool_calls_problem(value: Any) -> str | None:
    """An assistant message's `tool_calls`: 1..`MAX_TOOL_CALLS` calls, each an id, "function" and a
    function with a name and `arguments` (a JSON text of at most `MAX_TOOL_ARGUMENTS_CHARS`, nesting
    at most `MAX_TOOL_JSON_DEPTH`; it need not parse: a model may write broken arguments, and the
    caller sends them back as they were)."""
    if not isinstance(value, list) or not value:
        return "tool_calls: must be a non-empty list of calls"
    if len(value) > limits.MAX_TOOL_CALLS:
        return f"tool_calls: at most {limits.MAX_TOOL_CALLS} calls, not {len(value)}"
    for i, call in enumerate(value):
        where = f"tool_calls[{i}]"
        if (
            not isinstance(call, dict)
            or call.get("type") != "function"
            or set(call) != {"id", "type", "function"}
        ):
            return f'{where}: must be {{"id": ..., "type": "function", "function": {{...}}}}'
        problem = tool_call_id_problem(call["id"], f"{where}.id")
        if problem:
            return problem
        function = call["function"]
        if not isinstance(function, dict) or set(function) != {"name", "arguments"}:
            return f"{where}.function: must be an object with name and arguments"
        problem = _name_problem(f"{where}.function.name", function["name"])
        if problem:
            return problem
        arguments = function["arguments"]
        if not isinstance(arguments, str) or len(arguments) > limits.MAX_TOOL_ARGUMENTS_CHARS:
            most = limits.MAX_TOOL_ARGUMENTS_CHARS
            return f"{where}.function.arguments: must be a JSON text of at most {most} characters"
        if _text_depth(arguments) > limits.MAX_TOOL_JSON_DEPTH:
            return f"{where}.function.arguments: nests deeper than {limits.MAX_TOOL_JSON_DEPTH} levels"
    if json_bytes(value) > limits.MAX_TOOL_CALLS_CHARS:
        return f"tool_calls: over {limits.MAX_TOOL_CALLS_CHARS} bytes in all"
    return None


def tool_call_id_problem(value: Any, where: str = "tool_call_id") -> str | None:
    if not isinstance(value, str) or not limits.TOOL_CALL_ID_PATTERN.fullmatch(value):
        return f"{where}: must be 1-256 characters of letters, digits, '.', '_', ':' or '-'"
    return None


def _text_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest, outside its strings (never parsed: it may be
    anything, and `json.loads` of deep text raises `RecursionError`)."""
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    depth = deepest = 0
    # Brackets only, picked out at C speed: the loop runs over them alone.
    for char in _NOT_BRACKET.sub("", "".join(unescaped.split('"')[::2])):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def params_problem(name: str, value: Any) -> str | None:
    """The problem of one of the function-calling parameters (None for another parameter's name)."""
    rule = _PARAM_RULES.get(name)
    return None if rule is None else rule(value)


_PARAM_RULES = {
    "tools": tools_problem,
    "tool_choice": tool_choice_problem,
    "parallel_tool_calls": parallel_tool_calls_problem,
    "response_format": response_format_problem,
}
