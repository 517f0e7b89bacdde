"""Admin endpoints for teams: /admin/teams."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from gateway.api.admin.body import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, decode_body, page_params
from gateway.api.admin.deps import AdminServices
from gateway.api.admin.guards import admin_guard
from gateway.api.admin.views import team_out
from gateway.api.openapi import documented, json_schema
from gateway.api.query_params import documented_limit, documented_query, path_id
from gateway.db import teams
from gateway.schemas.admin import Page, TeamCreate, TeamOut, TeamUpdate


class TeamController(Controller):
    path = "/admin/teams"
    tags = ["admin"]
    guards = [admin_guard]

    @post("/", status_code=201, operation_class=documented(body=json_schema(TeamCreate)))
    async def create_team(self, request: Request, services: NamedDependency[AdminServices]) -> TeamOut:
        spec = decode_body(await request.body(), TeamCreate)
        async with services.sessions.begin() as session:
            return team_out(await teams.create_team(session, spec))

    @get("/", operation_class=documented())
    async def list_teams(
        self,
        services: NamedDependency[AdminServices],
        limit: Annotated[str | None, documented_limit(MAX_PAGE_SIZE, DEFAULT_PAGE_SIZE)] = None,
        cursor: Annotated[str | None, documented_query("The next_cursor of the previous page.")] = None,
    ) -> Page[TeamOut]:
        size, after = page_params(limit, cursor)
        async with services.sessions() as session:
            rows, next_cursor = await teams.list_teams(session, limit=size, cursor=after)
            return Page([team_out(team) for team in rows], next_cursor)

    @get("/{team_id:str}", operation_class=documented())
    async def get_team(self, services: NamedDependency[AdminServices], team_id: FromPath[str]) -> TeamOut:
        async with services.sessions() as session:
            return team_out(await teams.get_team(session, path_id(team_id, "team_id")))

    @patch("/{team_id:str}", operation_class=documented(body=json_schema(TeamUpdate)))
    async def update_team(
        self, request: Request, services: NamedDependency[AdminServices], team_id: FromPath[str]
    ) -> TeamOut:
        team_id = path_id(team_id, "team_id")
        patch_ = decode_body(await request.body(), TeamUpdate)
        async with services.sessions.begin() as session:
            out = team_out(await teams.update_team(session, team_id, patch_))
            stale = await teams.live_key_hashes(session, team_id)
        # After the commit: a process that reloads a key now sees the new limits.
        for key_hash in stale:
            await services.key_cache.invalidate(key_hash)
        return out

    @delete("/{team_id:str}", status_code=200, operation_class=documented())
    async def delete_team(self, services: NamedDependency[AdminServices], team_id: FromPath[str]) -> TeamOut:
        async with services.sessions.begin() as session:
            team, revoked = await teams.delete_team(session, path_id(team_id, "team_id"))
            out = team_out(team)
        for key_hash in revoked:
            await services.key_cache.invalidate(key_hash)
        return out
