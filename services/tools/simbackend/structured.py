"""What the simulated model answers when the request asks for function calling or JSON.

- `tools` given, `tool_choice` not "none", the last message the user's: one call of the named
  function (`tool_choice: {"type": "function", ...}`), else of the first tool, its arguments the
  schema's required properties (all of them when none is required) filled with simple values;
  the same request always gets the same call (its id derived from the conversation).
- A `tool` message last: text, as for any other turn (`protocol.answer`).
- `response_format` `json_object`: a JSON object quoting the user; `json_schema`: an object with
  the schema's required properties filled the same way.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# How deep a schema is followed when filling it in; deeper objects are left empty.
MAX_FILL_DEPTH = 8


def sample(schema: Any, depth: int = 0) -> Any:
    """A simple value that `schema` accepts (its first enum value, "sim", 1, true, [], an object with
    its required properties)."""
    if not isinstance(schema, dict):
        return "sim"
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "array":
        return []
    if kind == "object" or "properties" in schema:
        return _object(schema, depth)
    return "sim"


def _object(schema: dict[str, Any], depth: int) -> dict[str, Any]:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or depth >= MAX_FILL_DEPTH:
        return {}
    required = schema.get("required")
    names = (
        [n for n in required if n in properties]
        if isinstance(required, list) and required
        else list(properties)
    )
    return {name: sample(properties[name], depth + 1) for name in names}


def tool_call(tools: list[dict[str, Any]], tool_choice: Any, conversation: str) -> dict[str, Any] | None:
    """The call the simulated model makes, or None when it answers in text (`tool_choice` "none",
    no function to call)."""
    if tool_choice == "none" or not tools:
        return None
    functions: list[dict[str, Any]] = [
        t["function"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    if not functions:
        return None
    chosen: dict[str, Any] = functions[0]
    if isinstance(tool_choice, dict):
        named = (tool_choice.get("function") or {}).get("name")
        chosen = next((f for f in functions if f.get("name") == named), chosen)
    arguments = sample(chosen.get("parameters") or {"type": "object"})
    digest = hashlib.sha256(conversation.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return {
        "id": f"call_{digest}",
        "type": "function",
        "function": {"name": str(chosen.get("name")), "arguments": json.dumps(arguments)},
    }


def json_text(response_format: Any, quote: str) -> str | None:
    """The answer's JSON text for a JSON `response_format`; None for text."""
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return json.dumps({"reply": quote})
    if response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema") or {}
        schema = spec.get("schema") if isinstance(spec, dict) else None
        return json.dumps(sample(schema if isinstance(schema, dict) else {"type": "object"}))
    return None
