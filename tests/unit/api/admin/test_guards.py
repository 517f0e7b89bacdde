from __future__ import annotations

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from gateway.db import keys
from gateway.db.teams import new_id
from tests.unit.api.admin.conftest import ADMIN, StandInServices, admin_app, settings_with
from tests.unit.auth.records import add_key, add_team

Client = AsyncTestClient[Litestar]


@pytest.mark.parametrize("path", ["/admin/teams", "/admin/keys", f"/admin/teams/{new_id('team_')}"])
async def test_admin_key_opens_the_admin_api(client: Client, path: str) -> None:
    response = await client.get(path, headers=ADMIN)
    assert response.status_code in (200, 404)
    assert response.status_code == 200 or response.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Basic YWRtaW46eA=="}, {"Authorization": "Bearer"}]
)
async def test_missing_or_garbled_header_is_401(client: Client, headers: dict[str, str]) -> None:
    response = await client.get("/admin/teams", headers=headers)
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["type"] == "authentication_error"
    assert set(error) == {"message", "type", "param", "code"}


@pytest.mark.parametrize("key", ["admin-test-secreT", "sk-gw-" + "x" * 43])
async def test_an_unknown_key_is_401(client: Client, key: str) -> None:
    response = await client.post("/admin/teams", headers={"Authorization": f"Bearer {key}"}, json={})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert response.json()["error"]["code"] == "invalid_api_key"


async def test_a_revoked_team_key_is_401(client: Client, services: StandInServices) -> None:
    team = await add_team(services.sessions)
    key, secret = await add_key(services.sessions, team.id)
    async with services.sessions.begin() as session:
        await keys.revoke_key(session, key.id)
    response = await client.get("/admin/teams", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 401


async def test_failed_keys_are_throttled_per_client_and_the_admin_key_still_opens(
    client: Client, services: StandInServices
) -> None:
    team = await add_team(services.sessions)
    _, secret = await add_key(services.sessions, team.id)
    limit = services.key_attempts.limit
    team_key = {"Authorization": f"Bearer {secret}"}
    for _ in range(2 * limit):  # a live team key is no failure: 403, and its attempt is given back
        assert (await client.get("/admin/teams", headers=team_key)).status_code == 403
    statuses = [
        (await client.get("/admin/teams", headers={"Authorization": f"Bearer sk-gw-{n:043d}"})).status_code
        for n in range(limit + 5)
    ]
    assert statuses == [401] * limit + [429] * 5
    throttled = await client.get("/admin/teams", headers={"Authorization": f"Bearer sk-gw-{0:043d}"})
    assert throttled.json()["error"]["type"] == "rate_limit_error"
    assert 0 < int(throttled.headers["retry-after"]) <= 300
    # failed team keys do not lock the admin key out; guesses at the admin key have their own budget
    assert (await client.get("/admin/teams", headers=ADMIN)).status_code == 200
    guesses = [
        (await client.get("/admin/teams", headers={"Authorization": f"Bearer guess-{n}"})).status_code
        for n in range(limit + 1)
    ]
    assert guesses == [401] * limit + [429]


async def test_a_valid_team_key_is_403(client: Client, services: StandInServices) -> None:
    team = await add_team(services.sessions)
    _, secret = await add_key(services.sessions, team.id)
    assert (await services.key_cache.authenticate(f"Bearer {secret}")).team_id == team.id
    response = await client.get("/admin/keys", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 403
    assert secret not in response.text


async def test_without_a_configured_admin_key_everything_is_403(services: StandInServices) -> None:
    services.settings = settings_with(None)
    async with AsyncTestClient(app=admin_app(services)) as client:
        for headers in ({}, ADMIN):
            response = await client.get("/admin/teams", headers=headers)
            assert response.status_code == 403
            assert "GATEWAY_ADMIN_KEY is not set" in response.json()["error"]["message"]
