"""Validate gateway output against OpenAI's own OpenAPI document (tests/fixtures/openai/).

The document is OpenAPI 3.1 but still says `nullable: true` in places; it is rewritten once so
that such a schema also accepts null, then served to jsonschema through a referencing Registry.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

OPENAPI_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "openai" / "openapi.json"
_DOCUMENT_URI = "urn:openai-openapi"


def validate(schema_name: str, instance: object) -> None:
    """Raise jsonschema.ValidationError unless `instance` matches components.schemas[schema_name]."""
    if schema_name not in _document()["components"]["schemas"]:
        raise KeyError(f"no schema named {schema_name!r} in {OPENAPI_PATH}")
    schema = {"$ref": f"{_DOCUMENT_URI}#/components/schemas/{schema_name}"}
    validator = jsonschema.Draft202012Validator(schema, registry=_registry())
    validator.validate(instance)


@functools.cache
def _document() -> dict[str, Any]:
    document: dict[str, Any] = _allow_nullable(json.loads(OPENAPI_PATH.read_text()))
    return document


@functools.cache
def _registry() -> Registry[Any]:
    resource: Resource[Any] = DRAFT202012.create_resource(_document())
    registry: Registry[Any] = Registry().with_resource(_DOCUMENT_URI, resource)
    return registry


def _allow_nullable(node: Any) -> Any:
    if isinstance(node, list):
        return [_allow_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _allow_nullable(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable") is not True:
        return converted
    kind = converted.get("type")
    if isinstance(kind, str) and "enum" not in converted:
        return {**converted, "type": [kind, "null"]}
    return {"anyOf": [converted, {"type": "null"}]}
