"""Admin endpoints for team API keys: /admin/keys. DELETE revokes, everywhere, within seconds."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Request, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath

from gateway.api.admin.body import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, decode_body, page_params
from gateway.api.admin.deps import AdminServices
from gateway.api.admin.guards import admin_guard
from gateway.api.admin.views import key_created, key_out
from gateway.api.openapi import documented, json_schema
from gateway.api.query_params import documented_limit, documented_query, path_id, text_param
from gateway.db import keys
from gateway.schemas.admin import KeyCreate, KeyCreated, KeyOut, KeyUpdate, Page


class KeyController(Controller):
    path = "/admin/keys"
    tags = ["admin"]
    guards = [admin_guard]

    @post("/", status_code=201, operation_class=documented(body=json_schema(KeyCreate)))
    async def create_key(self, request: Request, services: NamedDependency[AdminServices]) -> KeyCreated:
        spec = decode_body(await request.body(), KeyCreate)
        async with services.sessions.begin() as session:
            key, secret = await keys.create_key(session, spec)
            return key_created(key, secret)

    @get("/", operation_class=documented())
    async def list_keys(
        self,
        services: NamedDependency[AdminServices],
        team_id: Annotated[str | None, documented_query("Only this team's keys.")] = None,
        limit: Annotated[str | None, documented_limit(MAX_PAGE_SIZE, DEFAULT_PAGE_SIZE)] = None,
        cursor: Annotated[str | None, documented_query("The next_cursor of the previous page.")] = None,
    ) -> Page[KeyOut]:
        size, after = page_params(limit, cursor)
        async with services.sessions() as session:
            rows, next_cursor = await keys.list_keys(
                session, team_id=text_param(team_id, "team_id"), limit=size, cursor=after
            )
            return Page([key_out(key) for key in rows], next_cursor)

    @get("/{key_id:str}", operation_class=documented())
    async def get_key(self, services: NamedDependency[AdminServices], key_id: FromPath[str]) -> KeyOut:
        async with services.sessions() as session:
            return key_out(await keys.get_key(session, path_id(key_id, "key_id")))

    @patch("/{key_id:str}", operation_class=documented(body=json_schema(KeyUpdate)))
    async def update_key(
        self, request: Request, services: NamedDependency[AdminServices], key_id: FromPath[str]
    ) -> KeyOut:
        key_id = path_id(key_id, "key_id")
        patch_ = decode_body(await request.body(), KeyUpdate)
        async with services.sessions.begin() as session:
            key = await keys.update_key(session, key_id, patch_)
            out, key_hash = key_out(key), key.key_hash
        await services.key_cache.invalidate(key_hash)  # after the commit, or a reload could see the old row
        return out

    @delete("/{key_id:str}", status_code=200, operation_class=documented())
    async def revoke_key(self, services: NamedDependency[AdminServices], key_id: FromPath[str]) -> KeyOut:
        async with services.sessions.begin() as session:
            key = await keys.revoke_key(session, path_id(key_id, "key_id"))
            out, key_hash = key_out(key), key.key_hash
        await services.key_cache.invalidate(key_hash)
        return out
