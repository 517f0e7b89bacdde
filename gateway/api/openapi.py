"""The OpenAPI document at `/schema`: its bearer schemes and which operations take which key, and a
Swagger UI (`/schema/swagger`) that loads nothing from the network.

Swagger UI's files come from the pinned `swagger-ui-bundle-v2` package (the Swagger UI distribution
as Python package data) and are served under `/schema/swagger-ui/`; Litestar's plugin would load
them, and its favicon, from a CDN. Which key an operation takes follows from its path, as the
gateway's own checks do: the admin key under `/admin`, a team key under `/v1` (on the Messages API
also as the anthropic SDK's `x-api-key`), none for the operators' endpoints (`/healthz`, `/readyz`,
`/metrics`).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Router
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin, SwaggerRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

from gateway.api.query_params import ID_SCHEMA

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
