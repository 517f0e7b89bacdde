"""The OpenAPI document and its Swagger UI, from the app `gateway serve` runs: a Swagger UI that
loads nothing from the network, the bearer schemes on the operations that take each key, and the
usage endpoints' parameters with their types."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from gateway.api.openapi import ADMIN_KEY, TEAM_KEY, TEAM_KEY_HEADER
from tests.unit.api.bad_parameters import Gateway, gateway

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
OPERATORS = ("/healthz", "/health", "/readyz", "/metrics")
REPORT = ("start", "end", "group_by", "team_id", "key_id", "model", "provider", "batch")


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with gateway(f"sqlite:///{tmp_path}/gateway.db") as gw:
        yield gw


@pytest.fixture
async def document(app: Gateway) -> dict[str, Any]:
    response = await app.client.get("/schema/openapi.json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in document["paths"].items():
        for method in METHODS:
            if method in item:
                yield path, method, item[method]


async def test_swagger_loads_only_what_the_gateway_serves(app: Gateway) -> None:
    page = await app.client.get("/schema/swagger")

    assert page.status_code == 200
    html = page.text.split("const ui = SwaggerUIBundle(")[0]  # the page itself, before the embedded document
    urls = re.findall(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=["']([^"']+)["']""", html)
    assert len(urls) == 4  # the bundle, the standalone preset, the stylesheet, the icon
    served = []
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), url
        asset = await app.client.get(url)
        assert asset.status_code == 200, url
        served.append(asset.content)
    assert all(len(content) > 100 for content in served)
    scripts = b"".join(served)
    assert b"SwaggerUIBundle" in scripts and b"SwaggerUIStandalonePreset" in scripts
    assert not re.search(r"https?://|//cdn", html)


async def test_the_document_is_openapi_3_1_with_resolvable_references(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1.")
    assert {"title", "version"} <= document["info"].keys()
    for ref in re.findall(r'"\$ref":\s*"([^"]+)"', str(document).replace("'", '"')):
        node: Any = document
        assert ref.startswith("#/"), ref
        for part in ref[2:].split("/"):
            node = node[part]  # a KeyError: a reference to nothing
    for path, method, operation in operations(document):
        assert operation.get("responses"), (method, path)
        for parameter in operation.get("parameters", []):
            assert {"name", "in", "schema"} <= parameter.keys(), (method, path, parameter)
            jsonschema.Draft202012Validator.check_schema(parameter["schema"])


async def test_the_bearer_schemes_are_declared(document: dict[str, Any]) -> None:
    schemes = document["components"]["securitySchemes"]

    assert {name: (s["type"], s.get("scheme")) for name, s in schemes.items()} == {
        TEAM_KEY: ("http", "bearer"),
        ADMIN_KEY: ("http", "bearer"),
        TEAM_KEY_HEADER: ("apiKey", None),
    }
    assert (schemes[TEAM_KEY_HEADER]["in"], schemes[TEAM_KEY_HEADER]["name"]) == ("header", "x-api-key")
    assert "security" not in document  # no default: each operation says what it takes


async def test_each_operation_asks_for_the_key_its_path_takes(document: dict[str, Any]) -> None:
    seen = set()
    for path, method, operation in operations(document):
        schemes = [name for requirement in operation.get("security", []) for name in requirement]
        if path.startswith("/admin/"):
            assert schemes == [ADMIN_KEY], (method, path)
        elif path.startswith("/v1/messages"):
            assert schemes == [TEAM_KEY, TEAM_KEY_HEADER], (method, path)
        elif path.startswith("/v1/"):
            assert schemes == [TEAM_KEY], (method, path)
        else:
            assert path in OPERATORS and schemes == [], (method, path)
        seen.add(path.split("/")[1])
    assert seen == {"admin", "v1", "healthz", "health", "readyz", "metrics"}


async def test_the_usage_parameters_are_typed_and_described(document: dict[str, Any]) -> None:
    def parameters(path: str) -> dict[str, dict[str, Any]]:
        listed = document["paths"][path]["get"]["parameters"]
        assert all(p["in"] == "query" and p.get("description") for p in listed), path
        return {p["name"]: p["schema"] for p in listed}

    report, team, events = (
        parameters(p) for p in ("/admin/usage", "/v1/gateway/usage", "/admin/usage/events")
    )

    for listed in (report, team, events):
        assert set(REPORT) <= listed.keys()
        assert all(listed[name]["type"] == "string" and listed[name]["maxLength"] == 512 for name in REPORT)
    for listed in (report, team):
        assert listed["format"]["enum"] == ["json", "csv"]
    assert events["limit"] | {"description": None} == {
        "type": "integer",
        "minimum": 1,
        "maximum": 1000,
        "default": 100,
        "description": None,
    }
    assert events["cursor"]["type"] == "string"
    assert "day" in report["group_by"]["description"] and report["start"]["examples"]
