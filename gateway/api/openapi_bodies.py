"""OpenAPI documentation for handlers that decode their own bodies from `request.body()`.

Litestar documents a request body only for a `data` parameter, and a 400 in its own validation
shape; these handlers read bytes and answer every error as the OpenAI error object. `documented()`
returns an `operation_class` that adds the body schema (from the msgspec wire Structs), the
success response's schema, optional header parameters, and the OpenAI error object for 4XX/5XX.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar.openapi.spec import Operation

from gateway.errors import ErrorBody
from gateway.routing.directives import BATCH_ID, CACHE_KEY_MAX

JSON = "application/json"
SSE = "text/event-stream"

# The `gateway` object of an OpenAI request body (parsed by gateway/routing/directives.py).
_NAME = {"type": "string", "minLength": 1, "maxLength": 200}
GATEWAY_OBJECT: dict[str, Any] = {
    "type": "object",
    "description": "Routing directives; removed before the request is forwarded.",
    "properties": {
        "batch": {"type": "string", "pattern": f"^{BATCH_ID.pattern}$"},
        "region": _NAME,
        "provider": {"anyOf": [_NAME, {"type": "array", "items": _NAME, "minItems": 1}]},
        "fallback": {"enum": ["batch", "never"]},
        "cache_key": {"type": "string", "minLength": 1, "maxLength": CACHE_KEY_MAX},
    },
    "additionalProperties": False,
}

_DIRECTIVE_HEADERS = {
    "X-Gateway-Batch": "Pin this request's batch (1-128 characters of A-Za-z0-9._:-).",
    "X-Gateway-Region": "Serve only from deployments in this region.",
    "X-Gateway-Provider": "Serve only from these providers (comma-separated, in order of preference).",
    "X-Gateway-Fallback": "batch (default) or never.",
    "X-Gateway-Cache-Key": "Prompt-cache key.",
}
DIRECTIVE_HEADERS: list[dict[str, Any]] = [
    {"name": name, "in": "header", "required": False, "description": text, "schema": {"type": "string"}}
    for name, text in _DIRECTIVE_HEADERS.items()
]


def json_schema(struct_type: Any) -> dict[str, Any]:
    """The JSON Schema of a msgspec type with its `$defs` inlined, so it stands alone in any document."""
    schema = msgspec.json.schema(struct_type)
    definitions = schema.pop("$defs", {})
    inlined: dict[str, Any] = _inline(schema, definitions, ())
    return inlined


def _inline(node: Any, definitions: dict[str, Any], expanding: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(item, definitions, expanding) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in expanding:  # a recursive type: stop at any object rather than loop
            return {"type": "object"}
        return _inline(definitions[name], definitions, (*expanding, name))
    return {key: _inline(value, definitions, expanding) for key, value in node.items()}


def _json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {JSON: {"schema": schema}}


ERROR_RESPONSES: dict[str, Any] = {
    status: {"description": text, "content": _json_content(json_schema(ErrorBody))}
    for status, text in (
        ("4XX", "The request was refused: an OpenAI error object."),
        ("5XX", "The gateway or the upstream failed: an OpenAI error object."),
    )
}


def openai_body(struct_type: Any) -> dict[str, Any]:
    """An OpenAI request Struct's schema, plus the `gateway` object; other fields are forwarded as sent."""
    schema = json_schema(struct_type)
    schema["properties"] = {**schema.get("properties", {}), "gateway": GATEWAY_OBJECT}
    schema.pop("additionalProperties", None)
    return schema


def documented(
    *,
    body: dict[str, Any] | None = None,
    response: dict[str, Any] | None = None,
    streams: bool = False,
    headers: list[dict[str, Any]] | None = None,
) -> type[Operation]:
    """An `operation_class` for a route decorator; `body`/`response` are JSON Schemas (see json_schema).

    `streams`: the success response may also be Server-Sent Events (`"stream": true`).
    """
    request_body = {"required": True, "content": _json_content(body)} if body is not None else None
    success: dict[str, Any] | None = None
    if response is not None:
        success = _json_content(response) | ({SSE: {"schema": {}}} if streams else {})

    class DocumentedOperation(Operation):
        def to_schema(self) -> dict[str, Any]:
            schema = super().to_schema()
            if request_body is not None:
                schema["requestBody"] = request_body
            if headers:
                schema["parameters"] = [*schema.get("parameters", []), *headers]
            responses: dict[str, Any] = schema.setdefault("responses", {})
            for status in [s for s in responses if not s.startswith("2")]:
                del responses[status]  # Litestar's own validation-error shape: never what we send
            if success is not None:
                for status in responses:
                    responses[status] = {**responses[status], "content": success}
            responses.update(ERROR_RESPONSES)
            return schema

    return DocumentedOperation
