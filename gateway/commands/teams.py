"""`gateway teams create|list`: manage teams directly in the database."""

from __future__ import annotations

import argparse
from decimal import Decimal

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.commands.database import run_in_transaction
from gateway.commands.terminal import listed, or_dash, render_table, split_list, when
from gateway.db import teams
from gateway.db.models import Team
from gateway.schemas.admin import TeamCreate
from gateway.settings import Settings

PAGE = 200


def add_team_parsers(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("teams", help="create and list teams")
    actions = parser.add_subparsers(dest="teams_command", required=True)

    create = actions.add_parser("create", help="create a team")
    create.add_argument("--name", required=True)
    create.add_argument("--allowed-models", help="comma-separated model aliases (default: all)")
    create.add_argument("--allowed-regions", help="comma-separated regions (default: all)")
    create.add_argument("--budget-usd", type=Decimal, help="monthly budget in USD")
    create.add_argument("--rpm", type=int, help="requests per minute")
    create.add_argument("--tpm", type=int, help="tokens per minute")
    create.add_argument(
        "--weight", type=float, default=1.0, help="share of a busy upstream against other teams (default 1)"
    )
    create.set_defaults(func=cmd_teams_create)

    listing = actions.add_parser("list", help="list teams")
    listing.set_defaults(func=cmd_teams_list)


def cmd_teams_create(args: argparse.Namespace) -> int:
    async def work(_: Settings, session: AsyncSession) -> int:
        spec = msgspec.convert(
            {
                "name": args.name,
                "allowed_models": split_list(args.allowed_models),
                "allowed_regions": split_list(args.allowed_regions),
                "monthly_budget_usd": args.budget_usd,
                "rpm_limit": args.rpm,
                "tpm_limit": args.tpm,
                "weight": args.weight,
            },
            TeamCreate,
        )
        team = await teams.create_team(session, spec)
        print(f"created team {team.id} ({team.name})")
        return 0

    return run_in_transaction(work)


def cmd_teams_list(_: argparse.Namespace) -> int:
    async def work(_: Settings, session: AsyncSession) -> int:
        rows: list[Team] = []
        cursor: str | None = None
        while True:
            page, cursor = await teams.list_teams(session, limit=PAGE, cursor=cursor)
            rows.extend(page)
            if cursor is None:
                break
        print(render_table(_TEAM_HEADERS, [_team_row(team) for team in rows]))
        return 0

    return run_in_transaction(work)


_TEAM_HEADERS = ["ID", "NAME", "MODELS", "REGIONS", "BUDGET_USD", "RPM", "TPM", "WEIGHT", "CREATED"]


def _team_row(team: Team) -> list[str]:
    return [
        team.id,
        team.name,
        listed(team.allowed_models),
        listed(team.allowed_regions),
        or_dash(team.monthly_budget_usd),
        or_dash(team.rpm_limit),
        or_dash(team.tpm_limit),
        f"{team.weight:g}",
        when(team.created_at),
    ]
