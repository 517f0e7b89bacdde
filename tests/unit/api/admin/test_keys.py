from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy import select

from gateway.db.models import ApiKey
from gateway.errors import AuthenticationFailed
from tests.unit.api.admin.conftest import ADMIN, StandInServices

Client = AsyncTestClient[Litestar]


@pytest.fixture
async def team_id(client: Client) -> str:
    response = await client.post(
        "/admin/teams", headers=ADMIN, json={"name": "research", "allowed_models": ["a", "b"]}
    )
    team_id: str = response.json()["id"]
    return team_id


async def create_key(client: Client, team_id: str, **body: Any) -> dict[str, Any]:
    response = await client.post(
        "/admin/keys", headers=ADMIN, json={"team_id": team_id, "name": "runner", **body}
    )
    assert response.status_code == 201, response.text
    key: dict[str, Any] = response.json()
    return key


async def test_the_secret_is_returned_once_and_only_its_hash_is_stored(
    client: Client, services: StandInServices, team_id: str
) -> None:
    created = await create_key(client, team_id, allowed_models=["b", "c"], rpm_limit=10)
    secret = created["key"]
    assert secret.startswith("sk-gw-")
    assert created["id"].startswith("key_")
    assert created["prefix"] == secret[:12]
    assert "key_hash" not in created

    shown = (await client.get(f"/admin/keys/{created['id']}", headers=ADMIN)).json()
    listed = (await client.get("/admin/keys", headers=ADMIN)).json()["data"]
    assert "key" not in shown
    assert listed == [shown]
    assert secret not in (await client.get("/admin/keys", headers=ADMIN)).text

    async with services.sessions() as session:
        row = (await session.scalars(select(ApiKey))).one()
    assert row.key_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in [str(value) for value in vars(row).values()]

    principal = await services.key_cache.authenticate(f"Bearer {secret}")
    assert principal.key_id == created["id"]
    assert principal.allowed_models == {"b"}
    assert principal.key_rpm == 10


async def test_delete_revokes_at_once_even_when_cached(
    client: Client, services: StandInServices, team_id: str
) -> None:
    created = await create_key(client, team_id)
    await services.key_cache.authenticate(f"Bearer {created['key']}")  # cached for an hour

    response = await client.delete(f"/admin/keys/{created['id']}", headers=ADMIN)
    assert response.status_code == 200
    assert response.json()["revoked_at"] is not None
    with pytest.raises(AuthenticationFailed, match="revoked"):
        await services.key_cache.authenticate(f"Bearer {created['key']}")
    again = await client.delete(f"/admin/keys/{created['id']}", headers=ADMIN)
    assert again.json()["revoked_at"] == response.json()["revoked_at"]


async def test_expiry_from_expires_in_s_or_expires_at(client: Client, team_id: str) -> None:
    soon = await create_key(client, team_id, expires_in_s=3600)
    expires = datetime.fromisoformat(soon["expires_at"])
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)

    at = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    later = await create_key(client, team_id, expires_at=at.isoformat())
    assert datetime.fromisoformat(later["expires_at"]) == at


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
        ({"expires_at": "2999-01-01T00:00:00"}, "expires_at"),  # no timezone: ambiguous
        ({"expires_in_s": 0}, "expires_in_s"),
        ({"expires_in_s": 60, "expires_at": "2999-01-01T00:00:00Z"}, "expires_at"),
        ({"secret": "sk-gw-mine"}, "secret"),
        ({"tpm_limit": -1}, "tpm_limit"),
    ],
)
async def test_invalid_key_requests_are_400(
    client: Client, team_id: str, body: dict[str, Any], param: str
) -> None:
    response = await client.post("/admin/keys", headers=ADMIN, json={"team_id": team_id, "name": "k", **body})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param


async def test_a_key_for_an_unknown_team_is_404(client: Client) -> None:
    response = await client.post("/admin/keys", headers=ADMIN, json={"team_id": "team_nope", "name": "k"})
    assert response.status_code == 404
    assert response.json()["error"]["param"] == "team_id"


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
async def test_unknown_key_is_404(client: Client, method: str) -> None:
    response = await client.request(method, "/admin/keys/key_nope", headers=ADMIN, json={})
    assert response.status_code == 404


async def test_patch_updates_and_reaches_the_cache(
    client: Client, services: StandInServices, team_id: str
) -> None:
    created = await create_key(client, team_id, tpm_limit=100)
    await services.key_cache.authenticate(f"Bearer {created['key']}")
    response = await client.patch(
        f"/admin/keys/{created['id']}", headers=ADMIN, json={"tpm_limit": None, "name": "renamed"}
    )
    assert response.status_code == 200
    assert (response.json()["tpm_limit"], response.json()["name"]) == (None, "renamed")
    assert (await services.key_cache.authenticate(f"Bearer {created['key']}")).key_tpm is None


async def test_list_filters_by_team_and_pages(client: Client, team_id: str) -> None:
    other = (await client.post("/admin/teams", headers=ADMIN, json={"name": "other"})).json()["id"]
    mine = [(await create_key(client, team_id, name=f"k{i}"))["id"] for i in range(3)]
    await create_key(client, other)

    first = (await client.get("/admin/keys", headers=ADMIN, params={"team_id": team_id, "limit": "2"})).json()
    assert first["next_cursor"] is not None
    rest = (
        await client.get(
            "/admin/keys",
            headers=ADMIN,
            params={"team_id": team_id, "limit": "2", "cursor": first["next_cursor"]},
        )
    ).json()
    assert [k["id"] for k in first["data"] + rest["data"]] == mine
    assert rest["next_cursor"] is None
    unknown = await client.get("/admin/keys", headers=ADMIN, params={"team_id": "team_nope"})
    assert unknown.status_code == 404
