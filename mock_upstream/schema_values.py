"""A value that conforms to a JSON schema, for the input of a tool call the mock is forced to make.

Deterministic (the same schema always gives the same value) and small: an object gets its required
properties only, an array as few items as it allows (at least one, to show the item shape), a
string `"mock"` unless a format, enum, const or length says otherwise. `$ref` into the schema's
own `$defs`/`definitions` is followed; `pattern` and `uniqueItems` are not honoured.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 12  # a recursive schema stops here: arrays empty, nullable values null
_GIVE_UP_DEPTH = 2 * MAX_DEPTH  # one that requires itself has no finite value: null ends it
_FORMATS = {
    "date": "2024-01-01",
    "date-time": "2024-01-01T00:00:00Z",
    "time": "00:00:00Z",
    "duration": "P1D",
    "email": "mock@example.com",
    "idn-email": "mock@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/mock",
    "iri": "https://example.com/mock",
    "url": "https://example.com/mock",
    "uri-reference": "/mock",
    "uuid": "00000000-0000-4000-8000-000000000000",
}


def tool_arguments(schema: Any) -> dict[str, Any]:
    """The arguments of a tool whose input (or parameters) schema is `schema`: always an object."""
    value = schema_value(schema) if isinstance(schema, dict) else {}
    return value if isinstance(value, dict) else {}


def schema_value(schema: Any) -> Any:
    """A value of `schema`, resolved against itself for `$ref`."""
    return _value(schema, schema if isinstance(schema, dict) else {}, 0)


def _value(schema: Any, root: dict[str, Any], depth: int) -> Any:
    if depth > _GIVE_UP_DEPTH:
        return None
    if not isinstance(schema, dict):
        return "mock" if schema is not False else None  # `true` (anything goes) or a malformed schema
    schema = _resolved(schema, root)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            return _value(_branch(branches, root, depth), root, depth)
    kind = _kind(schema, root, depth)
    if kind == "object":
        return _object(schema, root, depth)
    if kind == "array":
        return _array(schema, root, depth)
    if kind in ("integer", "number"):
        return _number(schema, integer=kind == "integer")
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema)


def _resolved(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$ref` followed and its `allOf` merged in (properties and required joined)."""
    for _ in range(MAX_DEPTH):
        reference = schema.get("$ref")
        if not isinstance(reference, str):
            break
        target = _pointer(root, reference)
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return schema
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in parts:
        if not isinstance(part, dict):
            continue
        part = _resolved(part, root)
        properties = {**(part.get("properties") or {}), **(merged.get("properties") or {})}
        required = [*(merged.get("required") or []), *(part.get("required") or [])]
        merged = {**part, **merged, "properties": properties, "required": list(dict.fromkeys(required))}
    return merged


def _pointer(root: dict[str, Any], reference: str) -> dict[str, Any]:
    """The schema a local `#/...` reference names; an empty schema when it names nothing."""
    if not reference.startswith("#"):
        return {}
    node: Any = root
    for token in reference[1:].split("/")[1:]:
        key = token.replace("~1", "/").replace("~0", "~")
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _branch(branches: list[Any], root: dict[str, Any], depth: int) -> Any:
    """The first branch that is not null, or, past the depth limit, a null branch if there is one."""
    nulls = [b for b in branches if isinstance(b, dict) and _resolved(b, root).get("type") == "null"]
    if depth >= MAX_DEPTH and nulls:
        return nulls[0]
    others = [b for b in branches if b not in nulls]
    return others[0] if others else branches[0]


def _kind(schema: dict[str, Any], root: dict[str, Any], depth: int) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if isinstance(k, str)]
        if depth >= MAX_DEPTH and "null" in kinds:
            return "null"
        return next((k for k in kinds if k != "null"), kinds[0] if kinds else None)
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return None


def _object(schema: dict[str, Any], root: dict[str, Any], depth: int) -> dict[str, Any]:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    names = [name for name in required if isinstance(name, str)] if isinstance(required, list) else []
    return {name: _value(properties.get(name, True), root, depth + 1) for name in names}


def _array(schema: dict[str, Any], root: dict[str, Any], depth: int) -> list[Any]:
    prefix = schema.get("prefixItems")
    values = [_value(item, root, depth + 1) for item in prefix] if isinstance(prefix, list) else []
    least = schema.get("minItems")
    most = schema.get("maxItems")
    count = least if isinstance(least, int) and least > 0 else (0 if depth >= MAX_DEPTH else 1)
    if isinstance(most, int):
        count = min(count, most)
    items = schema.get("items")
    if items is False or (prefix and "items" not in schema):
        return values
    while len(values) < count:
        values.append(_value(items if items is not None else True, root, depth + 1))
    return values


def _number(schema: dict[str, Any], *, integer: bool) -> int | float:
    """1 (or 1.0) moved inside the schema's bounds, rounded up to its `multipleOf`."""
    low, high = _bound(schema, "minimum"), _bound(schema, "maximum")
    low_open, high_open = _bound(schema, "exclusiveMinimum"), _bound(schema, "exclusiveMaximum")
    step = 1 if integer else 0.5
    value: float = 1
    if low is not None and value < low:
        value = low
    if low_open is not None and value <= low_open:
        value = low_open + step
    if high is not None and value > high:
        value = high
    if high_open is not None and value >= high_open:
        value = high_open - step if low_open is None else (low_open + high_open) / 2
    multiple = _bound(schema, "multipleOf")
    if multiple is not None and multiple > 0:
        value = math.ceil(value / multiple) * multiple
    return math.ceil(value) if integer else float(value)


def _bound(schema: dict[str, Any], keyword: str) -> float | None:
    """A numeric keyword's value; None when absent or not a number (draft 4's boolean exclusives)."""
    value = schema.get(keyword)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _string(schema: dict[str, Any]) -> str:
    text = _FORMATS.get(schema.get("format") or "", "mock")
    least, most = schema.get("minLength"), schema.get("maxLength")
    if isinstance(least, int) and len(text) < least:
        text = text + "x" * (least - len(text))
    if isinstance(most, int) and len(text) > most:
        text = text[: max(most, 0)]
    return text
