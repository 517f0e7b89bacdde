from __future__ import annotations

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

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


async def test_a_wrong_key_is_403(client: Client) -> None:
    response = await client.post(
        "/admin/teams", headers={"Authorization": "Bearer admin-test-secreT"}, json={}
    )
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"
    assert "admin key required" in response.json()["error"]["message"].lower()


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
