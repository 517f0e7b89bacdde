"""Inputs the fuzzers found answering 500 (or being stored wrong), pinned as ordinary tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from gateway.server.asgi import serving_app
from tests.fuzz.stack import FuzzStack, fuzz_settings, prepare_database
from tests.support.openapi import validate

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
