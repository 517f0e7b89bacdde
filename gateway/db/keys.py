"""API keys repository: issue (hash stored, secret returned once), read, page, update, revoke.

`load_principal` is the one query authentication makes: a key joined with its team;
`key_state_loader` gives it to the key cache (`gateway.auth.key_cache`), one session a lookup.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.auth.principal import KeyState, Principal, intersect
from gateway.auth.secrets import hash_secret, key_prefix, new_key_secret
from gateway.db.models import ApiKey, Team
from gateway.db.teams import as_utc, fetch_page, get_team, new_id, utcnow
from gateway.errors import InvalidRequest, NotFound
from gateway.schemas.admin import KeyCreate, KeyUpdate, changes


async def create_key(session: AsyncSession, spec: KeyCreate) -> tuple[ApiKey, str]:
    """Issue a key for a live team; returns the row and the secret, which is stored only hashed."""
    await get_team(session, spec.team_id, param="team_id")
    now = utcnow()
    expires_at = spec.expires_at
    if spec.expires_in_s is not None:
        expires_at = now + timedelta(seconds=spec.expires_in_s)
    if expires_at is not None and expires_at <= now:
        raise InvalidRequest("`expires_at` is in the past.", param="expires_at")
    secret = new_key_secret()
    key = ApiKey(
        id=new_id("key_"),
        team_id=spec.team_id,
        name=spec.name,
        key_hash=hash_secret(secret),
        key_prefix=key_prefix(secret),
        allowed_models=spec.allowed_models,
        allowed_regions=spec.allowed_regions,
        monthly_budget_usd=spec.monthly_budget_usd,
        rpm_limit=spec.rpm_limit,
        tpm_limit=spec.tpm_limit,
        expires_at=expires_at,
        created_at=now,
        updated_at=now,
    )
    session.add(key)
    await session.flush()
    return key, secret


async def get_key(session: AsyncSession, key_id: str) -> ApiKey:
    key = await session.get(ApiKey, key_id)
    if key is None:
        raise NotFound(f"No API key with id {key_id!r}.")
    return key


async def list_keys(
    session: AsyncSession, *, team_id: str | None, limit: int, cursor: str | None
) -> tuple[list[ApiKey], str | None]:
    query = select(ApiKey)
    if team_id is not None:
        if await session.get(Team, team_id) is None:  # deleted teams' keys stay listable
            raise NotFound(f"No team with id {team_id!r}.", param="team_id")
        query = query.where(ApiKey.team_id == team_id)
    return await fetch_page(session, query, ApiKey, limit=limit, cursor=cursor)


async def update_key(session: AsyncSession, key_id: str, patch: KeyUpdate) -> ApiKey:
    key = await get_key(session, key_id)
    for field, value in changes(patch).items():
        setattr(key, field, value)
    key.updated_at = utcnow()
    await session.flush()
    return key


async def revoke_key(session: AsyncSession, key_id: str) -> ApiKey:
    """Revoke a key; revoking a revoked key changes nothing (DELETE is idempotent)."""
    key = await get_key(session, key_id)
    if key.revoked_at is None:
        key.revoked_at = key.updated_at = utcnow()
        await session.flush()
    return key


async def load_principal(session: AsyncSession, key_hash: str) -> KeyState | None:
    """The key with this hash and its team, or None when no key has it."""
    query = select(ApiKey, Team).join(Team, Team.id == ApiKey.team_id).where(ApiKey.key_hash == key_hash)
    row = (await session.execute(query)).first()
    if row is None:
        return None
    key, team = row
    return KeyState(
        principal=principal_of(key, team),
        revoked=key.revoked_at is not None,
        team_deleted=team.deleted_at is not None,
    )


def key_state_loader(
    sessions: async_sessionmaker[AsyncSession],
) -> Callable[[str], Awaitable[KeyState | None]]:
    """`load_principal` in a session of its own, as the key cache reads keys."""

    async def load(key_hash: str) -> KeyState | None:
        async with sessions() as session:
            return await load_principal(session, key_hash)

    return load


def principal_of(key: ApiKey, team: Team) -> Principal:
    return Principal(
        key_id=key.id,
        key_prefix=key.key_prefix,
        team_id=team.id,
        team_name=team.name,
        allowed_models=intersect(key.allowed_models, team.allowed_models),
        allowed_regions=intersect(key.allowed_regions, team.allowed_regions),
        key_rpm=key.rpm_limit,
        key_tpm=key.tpm_limit,
        team_rpm=team.rpm_limit,
        team_tpm=team.tpm_limit,
        key_budget_usd=key.monthly_budget_usd,
        team_budget_usd=team.monthly_budget_usd,
        expires_at=as_utc(key.expires_at).timestamp() if key.expires_at is not None else None,
        team_weight=team.weight,
    )
