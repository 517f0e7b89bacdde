"""Teams and keys, for the admin only: list and create teams (`/ui/teams`), edit a team and issue its
keys (`/ui/teams/{id}`), edit and revoke a key (`/ui/keys/{id}`).

Every change goes through the repositories the admin API uses, with the same checks (the forms are
parsed into the admin API's Structs, `gateway.console.forms`), and, as there, a changed or revoked
key is dropped from every process's key cache once the change is committed. A new key's secret is
on the page that answers its creation and nowhere else, ever.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from gateway.api.admin.views import key_created, key_out, team_out
from gateway.console.auth.forgery import check_form
from gateway.console.auth.sessions import Viewer
from gateway.console.forms import form_fields, key_create, key_update, listed, team_create, team_update
from gateway.console.rendering import page
from gateway.db import keys, teams
from gateway.errors import GatewayError
from gateway.schemas.admin import KeyCreated
from gateway.services import Services, ServicesDependency

TEAMS_A_PAGE = 50
KEYS_A_PAGE = 100
NOTICES = {
    "team-saved": "Team saved.",
    "key-saved": "Key saved.",
    "key-revoked": "Key revoked: it is refused from now on, by every gateway process.",
}


def _notice(name: str | None) -> str | None:
    return NOTICES.get(name or "")


async def _teams_page(
    services: Services,
    admin: Viewer,
    cursor: str | None,
    *,
    form: dict[str, str],
    error: str | None,
    status: int,
) -> Template:
    async with services.sessions() as session:
        rows, next_cursor = await teams.list_teams(session, limit=TEAMS_A_PAGE, cursor=cursor)
    return page(
        "teams.html",
        admin,
        "teams",
        status_code=status,
        teams=[team_out(team) for team in rows],
        next_cursor=next_cursor,
        form=form,
        error=error,
        listed=listed,
    )


async def _team_page(
    services: Services,
    admin: Viewer,
    team_id: str,
    *,
    keys_after: str | None = None,
    new_key: KeyCreated | None = None,
    notice: str | None = None,
    error: str | None = None,
    key_form: dict[str, str] | None = None,
    status: int = 200,
) -> Template:
    async with services.sessions() as session:
        team = team_out(await teams.get_team(session, team_id))
        rows, next_cursor = await keys.list_keys(
            session, team_id=team_id, limit=KEYS_A_PAGE, cursor=keys_after
        )
    return page(
        "team.html",
        admin,
        "teams",
        status_code=status,
        team=team,
        keys=[key_out(key) for key in rows],
        next_cursor=next_cursor,
        new_key=new_key,
        notice=notice,
        error=error,
        key_form=key_form or {},
        listed=listed,
    )


@get("/teams")
async def teams_page(
    services: ServicesDependency, admin: NamedDependency[Viewer], cursor: FromQuery[str | None] = None
) -> Template:
    return await _teams_page(services, admin, cursor, form={}, error=None, status=200)


@post("/teams")
async def create_team(
    request: Request, services: ServicesDependency, admin: NamedDependency[Viewer]
) -> Response[Any]:
    form = await form_fields(request)
    check_form(request, admin, form)
    try:
        spec = team_create(form)
        async with services.sessions.begin() as session:
            team = await teams.create_team(session, spec)
            team_id = team.id
    except GatewayError as exc:  # a bad field, a name taken: the form again, with what was typed
        return await _teams_page(services, admin, None, form=form, error=exc.message, status=exc.status)
    return Redirect(f"/ui/teams/{team_id}", status_code=303)


@get("/teams/{team_id:str}")
async def team_page(
    services: ServicesDependency,
    admin: NamedDependency[Viewer],
    team_id: FromPath[str],
    notice: FromQuery[str | None] = None,
    keys_after: FromQuery[str | None] = None,
) -> Template:
    return await _team_page(services, admin, team_id, keys_after=keys_after, notice=_notice(notice))


@post("/teams/{team_id:str}")
async def update_team(
    request: Request, services: ServicesDependency, admin: NamedDependency[Viewer], team_id: FromPath[str]
) -> Response[Any]:
    form = await form_fields(request)
    check_form(request, admin, form)
    try:
        patch = team_update(form)
        async with services.sessions.begin() as session:
            await teams.update_team(session, team_id, patch)
            stale = await teams.live_key_hashes(session, team_id)
    except GatewayError as exc:
        return await _team_page(services, admin, team_id, error=exc.message, status=exc.status)
    for key_hash in stale:  # after the commit: a process that reloads a key sees the new limits
        await services.key_cache.invalidate(key_hash)
    return Redirect(f"/ui/teams/{team_id}?notice=team-saved", status_code=303)


@post("/teams/{team_id:str}/keys")
async def create_key(
    request: Request, services: ServicesDependency, admin: NamedDependency[Viewer], team_id: FromPath[str]
) -> Template:
    """The one page that shows the new key's secret: answered, not redirected, so that it is never
    in a URL or a later page."""
    form = await form_fields(request)
    check_form(request, admin, form)
    try:
        spec = key_create(team_id, form)
        async with services.sessions.begin() as session:
            key, secret = await keys.create_key(session, spec)
            created = key_created(key, secret)
    except GatewayError as exc:
        return await _team_page(services, admin, team_id, error=exc.message, key_form=form, status=exc.status)
    return await _team_page(services, admin, team_id, new_key=created, status=201)


@get("/keys/{key_id:str}")
async def key_page(
    services: ServicesDependency, admin: NamedDependency[Viewer], key_id: FromPath[str]
) -> Template:
    async with services.sessions() as session:
        key = key_out(await keys.get_key(session, key_id))
    return page("key.html", admin, "teams", key=key, listed=listed)


@post("/keys/{key_id:str}")
async def update_key(
    request: Request, services: ServicesDependency, admin: NamedDependency[Viewer], key_id: FromPath[str]
) -> Response[Any]:
    form = await form_fields(request)
    check_form(request, admin, form)
    try:
        patch = key_update(form)
        async with services.sessions.begin() as session:
            key = await keys.update_key(session, key_id, patch)
            team_id, key_hash = key.team_id, key.key_hash
    except GatewayError as exc:
        async with services.sessions() as session:
            current = key_out(await keys.get_key(session, key_id))
        return page(
            "key.html", admin, "teams", status_code=exc.status, key=current, listed=listed, error=exc.message
        )
    await services.key_cache.invalidate(key_hash)  # after the commit, or a reload could see the old row
    return Redirect(f"/ui/teams/{team_id}?notice=key-saved", status_code=303)


@post("/keys/{key_id:str}/revoke")
async def revoke_key(
    request: Request, services: ServicesDependency, admin: NamedDependency[Viewer], key_id: FromPath[str]
) -> Response[Any]:
    form = await form_fields(request)
    check_form(request, admin, form)
    async with services.sessions.begin() as session:
        key = await keys.revoke_key(session, key_id)
        team_id, key_hash = key.team_id, key.key_hash
    await services.key_cache.invalidate(key_hash)
    return Redirect(f"/ui/teams/{team_id}?notice=key-revoked", status_code=303)


TEAM_PAGE_HANDLERS = [
    teams_page,
    create_team,
    team_page,
    update_team,
    create_key,
    key_page,
    update_key,
    revoke_key,
]
