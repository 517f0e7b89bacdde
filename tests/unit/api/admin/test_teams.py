from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from gateway.errors import AuthenticationFailed
from tests.unit.api.admin.conftest import ADMIN, StandInServices

Client = AsyncTestClient[Litestar]


async def create_team(client: Client, **body: Any) -> dict[str, Any]:
    response = await client.post("/admin/teams", headers=ADMIN, json={"name": "research", **body})
    assert response.status_code == 201, response.text
    team: dict[str, Any] = response.json()
    return team


async def test_create_and_read_a_team(client: Client) -> None:
    team = await create_team(
        client,
        allowed_models=["gpt-4o"],
        allowed_regions=["eu-west"],
        monthly_budget_usd="1000.50",
        rpm_limit=60,
    )
    assert team["id"].startswith("team_")
    assert len(team["id"]) == len("team_") + 20
    assert team["name"] == "research"
    assert team["allowed_models"] == ["gpt-4o"]
    assert team["monthly_budget_usd"] == "1000.5"  # exact, as a decimal string
    assert team["tpm_limit"] is None
    assert team["weight"] == 1  # the default share
    assert team["created_at"].endswith(("Z", "+00:00"))

    fetched = await client.get(f"/admin/teams/{team['id']}", headers=ADMIN)
    assert fetched.status_code == 200
    assert fetched.json() == team


async def test_a_weight_is_stored_shown_and_patched(client: Client) -> None:
    team = await create_team(client, weight=2, rpm_limit=60)
    assert team["weight"] == 2
    assert (await client.get(f"/admin/teams/{team['id']}", headers=ADMIN)).json()["weight"] == 2

    response = await client.patch(f"/admin/teams/{team['id']}", headers=ADMIN, json={"weight": 0.25})
    assert response.status_code == 200
    assert (response.json()["weight"], response.json()["rpm_limit"]) == (0.25, 60)
    listed = (await client.get("/admin/teams", headers=ADMIN)).json()["data"]
    assert [t["weight"] for t in listed] == [0.25]


async def test_a_budget_may_be_a_json_number(client: Client) -> None:
    team = await create_team(client, monthly_budget_usd=250)
    assert team["monthly_budget_usd"] == "250"


async def test_a_duplicate_name_is_409(client: Client) -> None:
    await create_team(client)
    response = await client.post("/admin/teams", headers=ADMIN, json={"name": "research"})
    assert response.status_code == 409
    assert response.json()["error"] == {
        "message": response.json()["error"]["message"],
        "type": "invalid_request_error",
        "param": "name",
        "code": "conflict",
    }


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"name": "x", "rpm_limt": 5}, "rpm_limt"),
        ({"name": "x", "rpm_limit": "5"}, "rpm_limit"),
        ({"name": "x", "rpm_limit": 0}, "rpm_limit"),
        ({"name": ""}, "name"),
        ({}, "name"),
        ({"name": "x", "allowed_models": ["a", 3]}, "allowed_models[1]"),
        ({"name": "x", "monthly_budget_usd": "-1"}, "monthly_budget_usd"),
        ({"name": "x", "monthly_budget_usd": "lots"}, "monthly_budget_usd"),
        ({"name": "x", "monthly_budget_usd": "NaN"}, "monthly_budget_usd"),
        ({"name": "x", "weight": 0}, "weight"),
        ({"name": "x", "weight": -1}, "weight"),
        ({"name": "x", "weight": 0.0001}, "weight"),
        ({"name": "x", "weight": 1e308}, "weight"),
        ({"name": "x", "weight": "x"}, "weight"),
        ({"name": "x", "weight": "2"}, "weight"),
        ({"name": "x", "weight": True}, "weight"),
        ({"name": "x", "weight": None}, "weight"),
    ],
)
async def test_invalid_bodies_are_400_naming_the_field(
    client: Client, body: dict[str, Any], param: str
) -> None:
    response = await client.post("/admin/teams", headers=ADMIN, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"].startswith("Invalid request body")


async def test_a_weight_past_the_float_range_is_400_naming_it(client: Client) -> None:
    response = await client.post("/admin/teams", headers=ADMIN, content=b'{"name": "x", "weight": 1e400}')
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "weight"


@pytest.mark.parametrize("content", [b"", b"{", b"[1, 2]"])
async def test_a_body_that_is_not_a_json_object_is_400(client: Client, content: bytes) -> None:
    response = await client.post("/admin/teams", headers=ADMIN, content=content)
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_patch_changes_given_fields_and_null_clears(client: Client) -> None:
    team = await create_team(client, allowed_models=["gpt-4o"], rpm_limit=60, tpm_limit=1000)
    response = await client.patch(
        f"/admin/teams/{team['id']}", headers=ADMIN, json={"allowed_models": None, "rpm_limit": 120}
    )
    assert response.status_code == 200
    patched = response.json()
    assert patched["allowed_models"] is None
    assert patched["rpm_limit"] == 120
    assert patched["tpm_limit"] == 1000  # absent: unchanged
    assert patched["name"] == "research"


async def test_patch_cannot_null_the_name(client: Client) -> None:
    team = await create_team(client)
    response = await client.patch(f"/admin/teams/{team['id']}", headers=ADMIN, json={"name": None})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "name"


@pytest.mark.parametrize("weight", [None, 0, -1, "x"])
async def test_patch_refuses_a_weight_that_is_not_a_positive_number(client: Client, weight: object) -> None:
    team = await create_team(client, weight=3)
    response = await client.patch(f"/admin/teams/{team['id']}", headers=ADMIN, json={"weight": weight})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "weight"
    assert (await client.get(f"/admin/teams/{team['id']}", headers=ADMIN)).json()["weight"] == 3


async def test_patch_weight_reaches_cached_principals(client: Client, services: StandInServices) -> None:
    team = await create_team(client, weight=2)
    key = (await client.post("/admin/keys", headers=ADMIN, json={"team_id": team["id"], "name": "k"})).json()
    assert (await services.key_cache.authenticate(f"Bearer {key['key']}")).team_weight == 2
    await client.patch(f"/admin/teams/{team['id']}", headers=ADMIN, json={"weight": 5})
    assert (await services.key_cache.authenticate(f"Bearer {key['key']}")).team_weight == 5


async def test_patch_limits_reach_cached_principals(client: Client, services: StandInServices) -> None:
    team = await create_team(client, allowed_models=["gpt-4o", "llama"])
    key = (await client.post("/admin/keys", headers=ADMIN, json={"team_id": team["id"], "name": "k"})).json()
    assert (await services.key_cache.authenticate(f"Bearer {key['key']}")).may_use_model("llama")
    await client.patch(f"/admin/teams/{team['id']}", headers=ADMIN, json={"allowed_models": ["gpt-4o"]})
    assert not (await services.key_cache.authenticate(f"Bearer {key['key']}")).may_use_model("llama")


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
async def test_unknown_team_is_404(client: Client, method: str) -> None:
    response = await client.request(method, "/admin/teams/team_nope", headers=ADMIN, json={})
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


async def test_delete_hides_the_team_revokes_its_keys_and_frees_the_name(
    client: Client, services: StandInServices
) -> None:
    team = await create_team(client)
    key = (await client.post("/admin/keys", headers=ADMIN, json={"team_id": team["id"], "name": "k"})).json()
    await services.key_cache.authenticate(f"Bearer {key['key']}")  # cached for an hour

    deleted = await client.delete(f"/admin/teams/{team['id']}", headers=ADMIN)
    assert deleted.status_code == 200
    assert deleted.json()["deleted_at"] is not None

    assert (await client.get(f"/admin/teams/{team['id']}", headers=ADMIN)).status_code == 404
    assert (await client.get(f"/admin/keys/{key['id']}", headers=ADMIN)).json()["revoked_at"] is not None
    with pytest.raises(AuthenticationFailed, match="revoked"):
        await services.key_cache.authenticate(f"Bearer {key['key']}")
    assert (await client.get("/admin/teams", headers=ADMIN)).json()["data"] == []
    await create_team(client)  # the name is free again


async def test_list_pages_through_every_team_once(client: Client) -> None:
    created = [(await create_team(client, name=f"team-{i}"))["id"] for i in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params = {"limit": "2"} | ({"cursor": cursor} if cursor else {})
        page = (await client.get("/admin/teams", headers=ADMIN, params=params)).json()
        seen += [team["id"] for team in page["data"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == created  # creation order, none twice, none missed
    assert pages == 3


@pytest.mark.parametrize(
    ("params", "param", "status"),
    [({"limit": "0"}, "limit", 400), ({"limit": "x"}, "limit", 400), ({"cursor": "zz"}, "cursor", 404)],
)
async def test_bad_page_parameters_are_refused(
    client: Client, params: dict[str, str], param: str, status: int
) -> None:
    """A malformed limit is a 400; a cursor that names no page is a 404 (like an `after` naming no object)."""
    response = await client.get("/admin/teams", headers=ADMIN, params=params)
    assert response.status_code == status
    assert response.json()["error"]["param"] == param


async def test_the_openapi_schema_lists_the_admin_endpoints(client: Client) -> None:
    response = await client.get("/schema/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {"/admin/teams", "/admin/teams/{team_id}", "/admin/keys", "/admin/keys/{key_id}"} <= set(paths)
