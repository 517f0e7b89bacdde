"""The OpenAPI document at `/schema`: the operations' bodies and replies, their bearer schemes and
which operations take which key, and a Swagger UI (`/schema/swagger`) that loads nothing from the
network.

Litestar documents a request body only for a `data` parameter, and a 400 in its own validation
shape; the gateway's handlers read bytes and answer every error as the OpenAI error object.
`documented()` returns an `operation_class` that adds the body schema (from the msgspec wire
Structs), the success response's schema, optional header parameters, and the OpenAI error object
for 4XX/5XX.

Swagger UI's files come from the pinned `swagger-ui-bundle-v2` package (the Swagger UI distribution
as Python package data) and are served under `/schema/swagger-ui/`; Litestar's plugin would load
them, and its favicon, from a CDN. Which key an operation takes follows from its path, as the
gateway's own checks do: the admin key under `/admin`, a team key under `/v1` (on the Messages API
also as the anthropic SDK's `x-api-key`), none for the operators' endpoints (`/healthz`, `/readyz`,
`/metrics`).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Router
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin
from litestar.openapi.spec import Components, Operation, SecurityScheme
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

from gateway.api.query_params import ID_SCHEMA
from gateway.errors import ErrorBody
from gateway.routing.directives import BATCH_ID, CACHE_KEY_MAX

SCHEMA_PATH = "/schema"
ASSETS_PATH = "/swagger-ui"  # under SCHEMA_PATH
ASSETS_URL = SCHEMA_PATH + ASSETS_PATH
TEAM_KEY, TEAM_KEY_HEADER, ADMIN_KEY = "teamKey", "teamKeyHeader", "adminKey"
SECURITY_SCHEMES = {
    TEAM_KEY: SecurityScheme(
        type="http",
        scheme="bearer",
        description="A team's API key (`sk-gw-...`), as the OpenAI and Anthropic SDKs send it.",
    ),
    TEAM_KEY_HEADER: SecurityScheme(
        type="apiKey",
        name="x-api-key",
        security_scheme_in="header",
        description="A team's API key in `x-api-key`, as the anthropic SDK sends it (the Messages API).",
    ),
    ADMIN_KEY: SecurityScheme(
        type="http", scheme="bearer", description="The admin key (`GATEWAY_ADMIN_KEY`)."
    ),
}
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def security_of(path: str) -> list[dict[str, list[str]]] | None:
    """An endpoint's security requirements, any one of which will do; None: no key (the
    operators' endpoints)."""
    if path == "/admin" or path.startswith("/admin/"):
        return [{ADMIN_KEY: []}]
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return [{TEAM_KEY: []}, {TEAM_KEY_HEADER: []}]
    if path.startswith("/v1/"):
        return [{TEAM_KEY: []}]
    return None


def served_document(document: dict[str, Any]) -> dict[str, Any]:
    """The document as served: each operation with its `security`, and each path id that declares
    no rule of its own with `path_id`'s (gateway.api.query_params). The given one is left as it is
    (Litestar keeps it, and renders it again for every request)."""
    paths: dict[str, Any] = {}
    for path, item in document.get("paths", {}).items():
        security = security_of(path)
        paths[path] = dict(item)
        for method in _METHODS:
            if method not in item:
                continue
            operation = {
                **item[method],
                "parameters": [_with_id_rules(p) for p in item[method].get("parameters", [])],
            }
            if not operation["parameters"]:
                del operation["parameters"]
            if security is not None:
                operation["security"] = security
            paths[path][method] = operation
    return {**document, "paths": paths}


def _with_id_rules(parameter: dict[str, Any]) -> dict[str, Any]:
    if parameter.get("in") != "path" or parameter.get("schema") != {"type": "string"}:
        return parameter
    return {**parameter, "schema": dict(ID_SCHEMA)}


class SecuredJsonRenderPlugin(JsonRenderPlugin):
    """`/schema/openapi.json`, as `served_document` completes it."""

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        return super().render(request, served_document(openapi_schema))


class OfflineSwaggerRenderPlugin(SwaggerRenderPlugin):
    """`/schema/swagger` from the package's own copy of Swagger UI, as `served_document` completes it."""

    def __init__(self) -> None:
        super().__init__(
            js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
            css_url=f"{ASSETS_URL}/swagger-ui.css",
            standalone_preset_js_url=f"{ASSETS_URL}/swagger-ui-standalone-preset.js",
            favicon=f"<link rel='icon' type='image/png' href='{ASSETS_URL}/favicon-32x32.png'>",
        )

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        return super().render(request, served_document(openapi_schema))


def openapi_config(*, title: str, version: str) -> OpenAPIConfig:
    assets = create_static_files_router(
        path=ASSETS_PATH, directories=[swagger_ui_path], include_in_schema=False, name="swagger_ui_assets"
    )
    return OpenAPIConfig(
        title=title,
        version=version,
        path=SCHEMA_PATH,
        openapi_router=Router(SCHEMA_PATH, route_handlers=[assets], include_in_schema=False),
        components=Components(security_schemes=dict(SECURITY_SCHEMES)),
        render_plugins=[SecuredJsonRenderPlugin(), OfflineSwaggerRenderPlugin()],
    )


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
        "provider": {"anyOf": [_NAME, {"type": "array", "items": _NAME, "minItems": 1, "uniqueItems": True}]},
        "fallback": {"enum": ["batch", "never"]},
        "cache_key": {"type": "string", "minLength": 1, "maxLength": CACHE_KEY_MAX},
    },
    "additionalProperties": False,
}

# Each header as gateway/routing/directives.py reads it (its value stripped of surrounding blanks).
_BLANK_AROUND = "[ \\t]*"
_DIRECTIVE_HEADERS: dict[str, tuple[str, dict[str, Any]]] = {
    "X-Gateway-Batch": (
        "Pin this request's batch (1-128 characters of A-Za-z0-9._:-).",
        {"pattern": f"^{_BLANK_AROUND}{BATCH_ID.pattern}{_BLANK_AROUND}$"},
    ),
    "X-Gateway-Region": ("Serve only from deployments in this region.", {"pattern": "\\S", "maxLength": 200}),
    "X-Gateway-Provider": (
        "Serve only from these providers (comma-separated, each once, in order of preference).",
        {"pattern": "^[^,]*\\S[^,]*(,[^,]*\\S[^,]*)*$", "maxLength": 200},
    ),
    "X-Gateway-Fallback": ("batch (default) or never.", {"enum": ["batch", "never"]}),
    "X-Gateway-Cache-Key": ("Prompt-cache key.", {"pattern": "\\S", "maxLength": CACHE_KEY_MAX}),
}
DIRECTIVE_HEADERS: list[dict[str, Any]] = [
    {
        "name": name,
        "in": "header",
        "required": False,
        "description": text,
        "schema": {"type": "string", **rules},
    }
    for name, (text, rules) in _DIRECTIVE_HEADERS.items()
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
        if name in expanding:  # a recursive type: documented one level deep (deeper is read too)
            return {"not": {}}
        return _inline(definitions[name], definitions, (*expanding, name))
    inlined = {key: _inline(value, definitions, expanding) for key, value in node.items()}
    if inlined.get("format") == "decimal":  # msgspec reads a Decimal from a JSON number as well
        inlined["type"] = ["string", "number"]
    return inlined


def _json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {JSON: {"schema": schema}}


def error_responses(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """The 4XX and 5XX responses of an API whose error body is `schema` (`name` describes it)."""
    return {
        status: {"description": text.format(name), "content": _json_content(schema)}
        for status, text in (
            ("4XX", "The request was refused: {}."),
            ("5XX", "The gateway or the upstream failed: {}."),
        )
    }


ERROR_RESPONSES = error_responses(json_schema(ErrorBody), "an OpenAI error object")


# `stream_options` only with `"stream": true`, as OpenAI has it (gateway.proxy.request).
_STREAM_OPTIONS_NEED_STREAM = {
    "if": {"properties": {"stream_options": {"type": "object"}}, "required": ["stream_options"]},
    "then": {"properties": {"stream": {"const": True}}, "required": ["stream"]},
}


def openai_body(struct_type: Any) -> dict[str, Any]:
    """An OpenAI request Struct's schema, plus the `gateway` object; other fields are forwarded as sent."""
    schema = json_schema(struct_type)
    schema["properties"] = {**schema.get("properties", {}), "gateway": GATEWAY_OBJECT}
    schema.pop("additionalProperties", None)
    if "stream_options" in schema["properties"]:
        schema |= _STREAM_OPTIONS_NEED_STREAM
    return schema


def documented(
    *,
    body: dict[str, Any] | None = None,
    response: dict[str, Any] | None = None,
    streams: bool = False,
    headers: list[dict[str, Any]] | None = None,
    content: dict[str, Any] | None = None,
    also: dict[str, str] | None = None,
    body_type: str = JSON,
    errors: dict[str, Any] | None = None,
) -> type[Operation]:
    """An `operation_class` for a route decorator; `body`/`response` are JSON Schemas (see json_schema).

    `streams`: the success response may also be Server-Sent Events (`"stream": true`).
    `content`: the success response's media types and schemas, when it is not (only) JSON.
    `also`: more statuses (with their descriptions) that answer the same content, not an error object.
    `body_type`: the request body's media type, when it is not JSON (a multipart form).
    `errors`: the error responses, when not OpenAI's error object (`error_responses`).
    """
    request_body = {"required": True, "content": {body_type: {"schema": body}}} if body is not None else None
    success: dict[str, Any] | None = content
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
                for status, description in (also or {}).items():
                    responses[status] = {"description": description, "content": success}
            responses.update({k: v for k, v in (errors or ERROR_RESPONSES).items() if k not in responses})
            return schema

    return DocumentedOperation
