"""Hypothesis strategies for JSON values that an OpenAPI 3.1 (JSON Schema) document allows, for the
keywords our documents use: type (with "null"), enum, const, anyOf, $ref, properties, required,
additionalProperties (an open object gets a few extra scalar keys), not-required, string length and
pattern, number bounds, array length.

hypothesis-jsonschema does this in general but no longer runs on current Hypothesis; this covers
our documents, and `unsupported` fails loudly on any keyword it does not know, so a document that
outgrows it is noticed rather than half-generated.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

_KNOWN = {
    "type",
    "enum",
    "const",
    "anyOf",
    "$ref",
    "properties",
    "required",
    "additionalProperties",
    "not",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "items",
    # An object's bound: generated objects have at most 2 keys beyond their properties.
    "maxProperties",
    "description",
    "default",
    "title",
}
# Generated text stays short: long strings are the explicit cases' job, not the fuzzer's.
_MAX_TEXT = 40


def unsupported(schema: dict[str, Any]) -> set[str]:
    return set(schema) - _KNOWN


def from_schema(schema: dict[str, Any], components: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values `schema` accepts; `$ref`s are resolved in `components` (``#/components/schemas/X``)."""
    extra = unsupported(schema)
    if extra:
        raise ValueError(f"schema keywords not supported by the test strategy: {sorted(extra)}")
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(components[schema["$ref"].rsplit("/", 1)[-1]], components))
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(member, components) for member in schema["anyOf"]])
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return st.one_of([from_schema(schema | {"type": kind}, components) for kind in kinds])
    if kinds == "null":
        return st.none()
    if kinds == "boolean":
        return st.booleans()
    if kinds == "integer":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -(2**70) - 1) + 1)
        high = schema.get("maximum", schema.get("exclusiveMaximum", 2**70 + 1) - 1)
        return st.integers(min_value=low, max_value=high)
    if kinds == "number":
        return st.one_of(
            st.integers(
                min_value=int(schema.get("minimum", -(2**53))), max_value=int(schema.get("maximum", 2**53))
            ),
            st.floats(
                min_value=schema.get("minimum"),
                max_value=schema.get("maximum"),
                allow_nan=False,
                allow_infinity=False,
            ),
        )
    if kinds == "string":
        return _strings(schema)
    if kinds == "array":
        return st.lists(
            from_schema(schema.get("items", {}), components),
            min_size=schema.get("minItems", 0),
            max_size=min(schema.get("maxItems", 5), 5),
        )
    if kinds == "object":
        return _objects(schema, components)
    raise ValueError(f"schema type {kinds!r} not supported by the test strategy")


def _strings(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    low = schema.get("minLength", 0)
    high = min(schema.get("maxLength", _MAX_TEXT), _MAX_TEXT)
    if "pattern" in schema:
        # Our patterns carry their own length ({1,N}); the filter keeps the bounds exact.
        return st.from_regex(schema["pattern"], fullmatch=True).filter(
            lambda s: low <= len(s) <= schema.get("maxLength", len(s))
        )
    # No surrogates: a JSON encoder cannot write them as UTF-8 (the explicit cases cover them).
    return st.text(st.characters(exclude_categories=("Cs",)), min_size=low, max_size=max(low, high))


def _objects(schema: dict[str, Any], components: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = set(schema.get("required", ()))
    exclusive = set(schema.get("not", {}).get("required", ()))
    # An open object (a tool's definition, a JSON schema): a few more keys of short scalar values.
    extras = st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8)),
        max_size=0 if schema.get("additionalProperties", True) is False else 2,
    )

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        value: dict[str, Any] = {}
        for name, member in properties.items():
            if name in required or draw(st.booleans()):
                value[name] = draw(from_schema(member, components))
        for name, extra in draw(extras).items():
            value.setdefault(name, extra)
        if exclusive and exclusive <= set(value):
            # `not: {required: [a, b]}`: never all of them.
            del value[draw(st.sampled_from(sorted(exclusive)))]
        return value

    return build()
