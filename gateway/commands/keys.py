"""`gateway keys create|list|revoke`: manage team API keys directly in the database."""

from __future__ import annotations

import argparse
import sys
from decimal import Decimal

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.auth.key_cache import publish_invalidation
from gateway.commands.database import run_in_transaction
from gateway.commands.terminal import listed, render_table, split_list, when
from gateway.db import keys, teams
from gateway.db.models import ApiKey
from gateway.redis.client import redis_client
from gateway.schemas.admin import KeyCreate
from gateway.settings import Settings

PAGE = 200
SECONDS_PER_DAY = 86_400


def add_key_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("keys", help="create, list and revoke team API keys")
    actions = parser.add_subparsers(dest="keys_command", required=True)

    create = actions.add_parser("create", help="issue a key (the secret is printed once)")
    create.add_argument("--team", required=True, help="team id or name")
    create.add_argument("--name", required=True)
    create.add_argument("--expires-in-days", type=float, help="default: never expires")
    create.add_argument("--allowed-models", help="comma-separated model aliases (default: the team's)")
    create.add_argument("--budget-usd", type=Decimal, help="monthly budget in USD")
    create.add_argument("--rpm", type=int, help="requests per minute")
    create.add_argument("--tpm", type=int, help="tokens per minute")
    create.set_defaults(func=cmd_keys_create)

    listing = actions.add_parser("list", help="list keys (prefixes only, never secrets)")
    listing.add_argument("--team", help="team id or name")
    listing.set_defaults(func=cmd_keys_list)

    revoke = actions.add_parser("revoke", help="revoke a key")
    revoke.add_argument("key_id")
    revoke.set_defaults(func=cmd_keys_revoke)


def cmd_keys_create(args: argparse.Namespace) -> int:
    async def work(_: Settings, session: AsyncSession) -> int:
        team = await teams.find_team(session, args.team)
        days = args.expires_in_days
        spec = msgspec.convert(
            {
                "team_id": team.id,
                "name": args.name,
                "expires_in_s": None if days is None else round(days * SECONDS_PER_DAY),
                "allowed_models": split_list(args.allowed_models),
                "monthly_budget_usd": args.budget_usd,
                "rpm_limit": args.rpm,
                "tpm_limit": args.tpm,
            },
            KeyCreate,
        )
        key, secret = await keys.create_key(session, spec)
        expiry = f", expires {when(key.expires_at)} UTC" if key.expires_at else ""
        print(f"created key {key.id} ({key.name}) for team {team.name} ({team.id}){expiry}", file=sys.stderr)
        print("the secret below is shown only this once; the gateway keeps only its hash:", file=sys.stderr)
        print(secret)  # alone on stdout, so `$(gateway keys create ...)` captures exactly the key
        return 0

    return run_in_transaction(work)


def cmd_keys_list(args: argparse.Namespace) -> int:
    async def work(_: Settings, session: AsyncSession) -> int:
        team_id = (await teams.find_team(session, args.team)).id if args.team else None
        rows: list[ApiKey] = []
        cursor: str | None = None
        while True:
            page, cursor = await keys.list_keys(session, team_id=team_id, limit=PAGE, cursor=cursor)
            rows.extend(page)
            if cursor is None:
                break
        print(render_table(_KEY_HEADERS, [_key_row(key) for key in rows]))
        return 0

    return run_in_transaction(work)


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    async def work(settings: Settings, session: AsyncSession) -> int:
        key = await keys.revoke_key(session, args.key_id)
        await session.commit()  # before telling the gateways, or one could reload the unrevoked row
        if settings.redis_url:
            redis = redis_client(settings.redis_url)  # one server, a Sentinel set or a Cluster
            try:
                await publish_invalidation(redis, key.key_hash)
            finally:
                await redis.aclose()
            print(f"revoked {key.id} ({key.key_prefix}...); running gateways were told at once")
        else:
            print(f"revoked {key.id} ({key.key_prefix}...); gateways stop accepting it within seconds")
        return 0

    return run_in_transaction(work)


_KEY_HEADERS = ["ID", "TEAM", "NAME", "PREFIX", "MODELS", "EXPIRES", "REVOKED", "CREATED"]


def _key_row(key: ApiKey) -> list[str]:
    return [
        key.id,
        key.team_id,
        key.name,
        key.key_prefix,
        listed(key.allowed_models),
        when(key.expires_at),
        when(key.revoked_at),
        when(key.created_at),
    ]
