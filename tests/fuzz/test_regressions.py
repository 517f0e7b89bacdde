"""Inputs the fuzzers found answering 500 (or being stored wrong), pinned as ordinary tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema  # type: ignore[import-untyped]
import msgspec
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from gateway.schemas.nesting import MAX_NESTING
from gateway.server.asgi import serving_app
from tests.fuzz.stack import FuzzStack, fuzz_settings, prepare_database, served_gateway
from tests.support.openapi import validate
from tests.support.upstream import RunningUpstream, start_mock_upstream

Client = AsyncTestClient[Litestar]
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[tuple[FuzzStack, Client]]:
    settings = fuzz_settings(tmp_path)
    team_id, secret = await prepare_database(settings)
    stack = FuzzStack(serving_app(settings), settings, team_id, secret)
    async with AsyncTestClient(app=stack.app) as client:
        yield stack, client


def refused(status: int, body: Any, param: str | None = None) -> None:
    validate("ErrorResponse", body)
    assert status == 400, body
    if param is not None:
        assert body["error"]["param"] == param


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/completions", {"model": "gpt-4o-mini", "prompt": []}, "prompt"),
        ("/v1/completions", {"model": "gpt-4o-mini", "prompt": [[]]}, "prompt[0]"),
        ("/v1/embeddings", {"model": "text-embedding-3-small", "input": []}, "input"),
    ],
)
async def test_empty_prompt_and_input_lists_are_400(
    gateway: tuple[FuzzStack, Client], path: str, body: dict[str, Any], param: str
) -> None:
    stack, client = gateway
    response = await client.post(path, json=body, headers=stack.team_auth)
    refused(response.status_code, response.json(), param)


async def test_a_body_nested_thousands_deep_is_400(gateway: tuple[FuzzStack, Client]) -> None:
    stack, client = gateway
    raw = b'{"model":"gpt-4o-mini","messages":[],"x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    response = await client.post("/v1/chat/completions", content=raw, headers=stack.team_auth)
    refused(response.status_code, response.json())


# --- JSON nested past the bound (gateway.schemas.nesting): a 400 naming it, wherever JSON is read
# Deep values are written as JSON text: encoding them (json or msgspec) would recurse in the test.


def nested_schema(depth: int) -> bytes:
    """A JSON Schema about `depth` levels deep: each property wraps it in two objects."""
    wraps = depth // 2
    return b'{"type":"object","properties":{"a":' * wraps + b'{"type":"string"}' + b"}}" * wraps


def nested_list(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def with_field(body: dict[str, Any], name: str, value: bytes) -> bytes:
    """`body` as JSON with one more field, whose value is the JSON text `value`."""
    return msgspec.json.encode(body)[:-1] + b',"' + name.encode() + b'":' + value + b"}"


async def post_raw(client: Client, path: str, raw: bytes, headers: dict[str, str]) -> httpx.Response:
    return await client.post(path, content=raw, headers={**headers, "content-type": "application/json"})


def refused_for_depth(response: httpx.Response) -> None:
    body = response.json()
    refused(response.status_code, body)
    assert body["error"]["param"] is None
    assert str(MAX_NESTING) in body["error"]["message"], body


async def test_responses_tools_nested_970_deep_are_400(gateway: tuple[FuzzStack, Client]) -> None:
    """They reached the built-in mock, whose parser recursed past Python's limit: a 500."""
    stack, client = gateway
    tools = b'[{"type":"function","name":"f","parameters":' + nested_schema(970) + b"}]"
    raw = with_field({"model": "gpt-4o-mini", "input": "hi"}, "tools", tools)
    refused_for_depth(await post_raw(client, "/v1/responses", raw, stack.team_auth))


CHAT_BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
ONE_PAST = nested_list(MAX_NESTING)  # as a top-level field: the bound plus one


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", CHAT_BODY),
        ("/v1/completions", {"model": "gpt-4o-mini", "prompt": "hi"}),
        ("/v1/embeddings", {"model": "text-embedding-3-small", "input": "hi"}),
        ("/v1/responses", {"model": "gpt-4o-mini", "input": "hi"}),
        ("/v1/messages", {**CHAT_BODY, "max_tokens": 5}),
        ("/v1/messages/count_tokens", CHAT_BODY),
        ("/v1/batches", {"input_file_id": "file-x", "endpoint": "/v1/chat/completions"}),
        ("/admin/teams", {"name": "t"}),
        ("/admin/keys", {"team_id": "t", "name": "k"}),
    ],
)
async def test_one_level_past_the_bound_is_400_naming_it(
    gateway: tuple[FuzzStack, Client], path: str, body: dict[str, Any]
) -> None:
    stack, client = gateway
    raw = with_field(body, "x", ONE_PAST)
    refused_for_depth(await post_raw(client, path, raw, stack.auth_for(path)))


async def test_a_body_at_the_bound_is_served(gateway: tuple[FuzzStack, Client]) -> None:
    stack, client = gateway
    raw = with_field(CHAT_BODY, "x", nested_list(MAX_NESTING - 1))
    response = await post_raw(client, "/v1/chat/completions", raw, stack.team_auth)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", ["/v1/batches", "/admin/teams"])
async def test_an_ignored_field_thousands_deep_is_400(gateway: tuple[FuzzStack, Client], path: str) -> None:
    """msgspec's recursion guard fired while skipping the unknown field: a 500 on /v1/batches."""
    stack, client = gateway
    raw = b'{"x":' + nested_list(5000) + b',"input_file_id":"file-x","name":"t"}'
    refused_for_depth(await post_raw(client, path, raw, stack.auth_for(path)))


@pytest.fixture(scope="module")
def upstream() -> Iterator[RunningUpstream]:
    with start_mock_upstream() as running:
        yield running


OPENAI_UPSTREAM = """
providers:
  - name: openai-upstream
    kind: openai
    region: us-east
    base_url: {base_url}/v1
models:
  - name: gpt-4o-mini
    deployments:
      - provider: openai-upstream
        model: upstream-chat
        price: {{input: 1, output: 1}}
"""


def test_a_streamed_response_format_schema_970_deep_is_400_before_an_openai_upstream(
    tmp_path: Path, upstream: RunningUpstream
) -> None:
    """`gateway serve` parsed it, then the openai adapter's encoder recursed past the limit: a 500."""
    config = tmp_path / "gateway.yaml"
    config.write_text(OPENAI_UPSTREAM.format(base_url=upstream.base_url))
    schema = b'{"type":"array","items":' * 970 + b'{"type":"string"}' + b"}" * 970
    response_format = b'{"type":"json_schema","json_schema":{"name":"deep","schema":' + schema + b"}}"
    raw = with_field({**CHAT_BODY, "stream": True}, "response_format", response_format)
    with served_gateway(tmp_path, config) as served:
        upstream.clear()
        headers = {**served.team_auth, "content-type": "application/json"}
        response = httpx.post(
            f"{served.base_url}/v1/chat/completions", content=raw, headers=headers, timeout=30
        )
        refused_for_depth(response)
        assert upstream.stats()["total"] == 0  # refused before anything was sent


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/v1/messages"])
def test_the_mock_upstream_answers_a_body_5000_deep_with_400(upstream: RunningUpstream, path: str) -> None:
    """Its parser hit msgspec's recursion guard: a 500 (or a dropped connection) from the mock."""
    raw = with_field({"model": "m", "max_tokens": 5, "input": "hi", "messages": []}, "x", nested_list(5000))
    response = httpx.post(
        upstream.base_url + path, content=raw, headers={"content-type": "application/json"}, timeout=10
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert str(MAX_NESTING) in error["message"]
    assert upstream.requests()[-1]["path"] == path  # recorded, without its body


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"name": "t", "tpm_limit": 69316744964155323187200}, "tpm_limit"),
        ({"name": "t", "rpm_limit": 2**31}, "rpm_limit"),
        ({"name": "t", "monthly_budget_usd": "9999999999.99999999999"}, "monthly_budget_usd"),
    ],
)
async def test_team_numbers_beyond_their_columns_are_400(
    gateway: tuple[FuzzStack, Client], body: dict[str, Any], param: str
) -> None:
    stack, client = gateway
    response = await client.post("/admin/teams", json=body, headers=stack.admin_auth)
    refused(response.status_code, response.json(), param)


@pytest.mark.parametrize(
    "extra",
    [{"expires_in_s": 10**14}, {"expires_at": "9999-12-31T23:59:59-23:59"}],
)
async def test_key_expiry_beyond_the_calendar_is_400(
    gateway: tuple[FuzzStack, Client], extra: dict[str, Any]
) -> None:
    stack, client = gateway
    body = {"team_id": stack.team_id, "name": "k", **extra}
    response = await client.post("/admin/keys", json=body, headers=stack.admin_auth)
    refused(response.status_code, response.json())


async def test_a_key_expiry_with_an_offset_is_stored_as_the_same_instant(
    gateway: tuple[FuzzStack, Client],
) -> None:
    stack, client = gateway
    body = {"team_id": stack.team_id, "name": "k", "expires_at": "2030-01-01T00:00:00+02:00"}
    created = await client.post("/admin/keys", json=body, headers=stack.admin_auth)
    assert created.status_code == 201, created.text
    read = await client.get(f"/admin/keys/{created.json()['id']}", headers=stack.admin_auth)
    assert read.json()["expires_at"] in ("2029-12-31T22:00:00Z", "2029-12-31T22:00:00+00:00")


@pytest.mark.parametrize("limit", ["\u00b3", "\u0663", "1\u00b2"])
async def test_a_page_limit_in_other_digits_is_400(gateway: tuple[FuzzStack, Client], limit: str) -> None:
    stack, client = gateway
    response = await client.get("/admin/keys", params={"limit": limit}, headers=stack.admin_auth)
    refused(response.status_code, response.json(), "limit")


# --- the served OpenAPI document against the implementation


@pytest.mark.parametrize(
    ("path", "methods"),
    [
        ("/v1/files", {"GET", "POST", "OPTIONS"}),
        ("/v1/batches", {"GET", "POST", "OPTIONS"}),
        ("/admin/teams", {"GET", "POST", "OPTIONS"}),
        ("/admin/keys/k", {"GET", "PATCH", "DELETE", "OPTIONS"}),
    ],
)
async def test_options_allows_every_method_of_the_path(
    gateway: tuple[FuzzStack, Client], path: str, methods: set[str]
) -> None:
    """Litestar's own OPTIONS answer named only the methods of the path's first handler."""
    stack, client = gateway
    response = await client.options(path, headers=stack.auth_for(path))
    assert response.status_code == 204
    assert {method.strip() for method in response.headers["allow"].split(",")} == methods


async def test_metrics_names_its_charset_once(gateway: tuple[FuzzStack, Client]) -> None:
    _, client = gateway
    response = await client.get("/metrics")
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"


async def test_the_document_describes_what_readyz_metrics_and_usage_answer(
    gateway: tuple[FuzzStack, Client],
) -> None:
    """/readyz was documented as a string, /metrics and the usage reports as JSON only."""
    _, client = gateway
    paths = (await client.get("/schema/openapi.json")).json()["paths"]
    ready = paths["/readyz"]["get"]["responses"]
    assert ready["200"]["content"]["application/json"]["schema"]["type"] == "object"
    assert ready["503"]["content"] == ready["200"]["content"]
    assert list(paths["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain; version=0.0.4"]
    for report in ("/admin/usage", "/v1/gateway/usage"):
        assert set(paths[report]["get"]["responses"]["200"]["content"]) == {"application/json", "text/csv"}
    body = (await client.get("/readyz")).json()
    validate_against(ready["200"]["content"]["application/json"]["schema"], body)


def validate_against(schema: dict[str, Any], instance: Any) -> None:
    jsonschema.Draft202012Validator(schema).validate(instance)
