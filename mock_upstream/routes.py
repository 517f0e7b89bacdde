"""Which mock endpoint a method and path name, and the minimal request checks each endpoint makes.

Paths are matched on their suffix, so the mock answers under any base URL prefix
(`http://mock/v1/chat/completions`, `http://mock/eu/v1/chat/completions`...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qs


class Api(StrEnum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


class Operation(StrEnum):
    CHAT = "chat"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"
    MODELS = "models"
    MODEL = "model"
    MESSAGES = "messages"
    RESPONSES = "responses"
    COUNT_TOKENS = "count_tokens"  # Anthropic's /v1/messages/count_tokens
    # the providers' batch APIs (mock_upstream.batch_api)
    FILE_UPLOAD = "file_upload"
    FILE_CONTENT = "file_content"
    BATCH_CREATE = "batch_create"
    BATCH_GET = "batch_get"
    BATCH_CANCEL = "batch_cancel"
    MESSAGE_BATCH_CREATE = "message_batch_create"
    MESSAGE_BATCH_GET = "message_batch_get"
    MESSAGE_BATCH_RESULTS = "message_batch_results"
    MESSAGE_BATCH_CANCEL = "message_batch_cancel"


@dataclass(frozen=True, slots=True)
class Route:
    api: Api
    operation: Operation
    deployment: str | None = None  # Azure: the deployment named in the path
    model_id: str | None = None  # GET /models/{id}
    item_id: str | None = None  # the file or batch a batch API path names


_AZURE = re.compile(r"/openai/deployments/([^/]+)/(chat/completions|completions|embeddings)$")
_POST_SUFFIXES = (
    ("/chat/completions", Api.OPENAI, Operation.CHAT),
    ("/completions", Api.OPENAI, Operation.COMPLETIONS),
    ("/embeddings", Api.OPENAI, Operation.EMBEDDINGS),
    ("/messages", Api.ANTHROPIC, Operation.MESSAGES),
    ("/messages/count_tokens", Api.ANTHROPIC, Operation.COUNT_TOKENS),
    ("/responses", Api.OPENAI, Operation.RESPONSES),  # Azure's too: /openai/v1/responses
)
_MODEL = re.compile(r"/models/([^/]+)$")
# The batch API paths, Anthropic's first: `/messages/batches` also ends like OpenAI's `/batches`.
_BATCH_PATHS = (
    ("POST", re.compile(r"/messages/batches$"), Api.ANTHROPIC, Operation.MESSAGE_BATCH_CREATE),
    ("GET", re.compile(r"/messages/batches/([^/]+)$"), Api.ANTHROPIC, Operation.MESSAGE_BATCH_GET),
    (
        "GET",
        re.compile(r"/messages/batches/([^/]+)/results$"),
        Api.ANTHROPIC,
        Operation.MESSAGE_BATCH_RESULTS,
    ),
    ("POST", re.compile(r"/messages/batches/([^/]+)/cancel$"), Api.ANTHROPIC, Operation.MESSAGE_BATCH_CANCEL),
    ("POST", re.compile(r"/files$"), Api.OPENAI, Operation.FILE_UPLOAD),
    ("GET", re.compile(r"/files/([^/]+)/content$"), Api.OPENAI, Operation.FILE_CONTENT),
    ("POST", re.compile(r"/batches$"), Api.OPENAI, Operation.BATCH_CREATE),
    ("GET", re.compile(r"/batches/([^/]+)$"), Api.OPENAI, Operation.BATCH_GET),
    ("POST", re.compile(r"/batches/([^/]+)/cancel$"), Api.OPENAI, Operation.BATCH_CANCEL),
)
BATCH_OPERATIONS = frozenset(operation for _, _, _, operation in _BATCH_PATHS)
_AZURE_OPERATIONS = {"chat/completions": Operation.CHAT, "completions": Operation.COMPLETIONS,
                     "embeddings": Operation.EMBEDDINGS}  # fmt: skip


def api_of_path(path: str) -> Api:
    """The API whose error format a path expects (for errors before a route is known)."""
    return Api.ANTHROPIC if path.endswith("/messages") or "/messages/batches" in path else Api.OPENAI


def _batch_route(method: str, path: str) -> Route | None:
    for wanted, pattern, api, operation in _BATCH_PATHS:
        found = pattern.search(path) if method == wanted else None
        if found:
            return Route(api, operation, item_id=found.group(1) if found.groups() else None)
    return None


def match_route(method: str, path: str) -> Route | None:
    batch = _batch_route(method, path)
    if batch is not None:
        return batch
    if method == "POST":
        azure = _AZURE.search(path)
        if azure:
            return Route(Api.OPENAI, _AZURE_OPERATIONS[azure.group(2)], deployment=azure.group(1))
        for suffix, api, operation in _POST_SUFFIXES:
            if path.endswith(suffix):
                return Route(api, operation)
    if method == "GET":
        if path.endswith("/models"):
            return Route(Api.OPENAI, Operation.MODELS)
        model = _MODEL.search(path)
        if model:
            return Route(Api.OPENAI, Operation.MODEL, model_id=model.group(1))
    return None


def has_api_version(query: str) -> bool:
    return bool(parse_qs(query).get("api-version"))


def request_problem(route: Route, body: Any) -> str | None:
    """Why the body is not a valid request for the route, or None when it is."""
    if route.operation in (Operation.MODELS, Operation.MODEL) or route.operation in BATCH_OPERATIONS:
        return None  # a batch API request is checked where it is answered (batch_api)
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if route.deployment is None and not isinstance(body.get("model"), str):
        return "you must provide a model parameter"
    required = {
        Operation.CHAT: ("messages", list),
        Operation.COMPLETIONS: ("prompt", str | list),
        Operation.EMBEDDINGS: ("input", str | list),
        Operation.MESSAGES: ("messages", list),
        Operation.COUNT_TOKENS: ("messages", list),
        Operation.RESPONSES: ("input", str | list),
    }[route.operation]
    if not isinstance(body.get(required[0]), required[1]):
        return f"'{required[0]}' is a required property"
    if route.operation is Operation.MESSAGES and not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    return _size_problem(route, body)


# OpenAI's own bounds on the fields that size an answer: without them one request could ask the
# fake for a billion choices or a billion-float vector, and take the process's memory with it.
MAX_CHOICES = 128
MAX_DIMENSIONS = 3072
MAX_BATCH = 2048  # prompts of one completions request, inputs of one embeddings request


def _size_problem(route: Route, body: dict[str, Any]) -> str | None:
    n = body.get("n")
    if isinstance(n, int) and n > MAX_CHOICES:
        return f"Invalid 'n': integer above maximum value. Expected a value <= {MAX_CHOICES}, but got {n} instead."
    dimensions = body.get("dimensions")
    if isinstance(dimensions, int) and dimensions > MAX_DIMENSIONS:
        return f"Invalid 'dimensions': expected a value <= {MAX_DIMENSIONS}, but got {dimensions} instead."
    batch = body.get("prompt" if route.operation is Operation.COMPLETIONS else "input")
    if route.operation in (Operation.COMPLETIONS, Operation.EMBEDDINGS) and isinstance(batch, list):
        size = len(batch)
        if size > MAX_BATCH:
            return f"Invalid array: at most {MAX_BATCH} items, got {size}."
    return None
