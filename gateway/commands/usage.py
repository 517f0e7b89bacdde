"""`gateway usage`: the usage report as a table (or CSV/JSON) in the terminal, from the records."""

from __future__ import annotations

import argparse
from datetime import UTC, date, datetime

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.commands.database import run_in_transaction
from gateway.commands.terminal import render_table
from gateway.metering.pricing import money_str
from gateway.metering.reports import ROW_FIELD, UsageQuery, parse_group_by, report_csv, usage_report
from gateway.settings import Settings

TOTALS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens")


def _day(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    return datetime.combine(date.fromisoformat(raw), datetime.min.time(), UTC)


def cmd_usage(args: argparse.Namespace) -> int:
    async def work(_: Settings, session: AsyncSession) -> int:
        query = UsageQuery(
            start=_day(args.start),
            end=_day(args.end),
            group_by=parse_group_by(args.group_by),
            team_id=args.team,
            key_id=args.key,
            model=args.model,
            provider=args.provider,
            batch=args.batch,
        )
        rows = await usage_report(session, query)
        if args.format == "csv":
            print(report_csv(rows, query.group_by), end="")
        elif args.format == "json":
            print(msgspec.json.encode(rows, enc_hook=str).decode())
        else:
            columns = [ROW_FIELD[field] for field in query.group_by]
            table = [
                [str(getattr(row, c) or "-") for c in columns]
                + [str(getattr(row, t)) for t in TOTALS]
                + [money_str(row.cost), money_str(row.saving)]
                for row in rows
            ]
            print(render_table([*columns, *TOTALS, "cost_usd", "saving_usd"], table))
        return 0

    return run_in_transaction(work)


def add_usage_parser(commands: argparse._SubParsersAction) -> None:
    usage = commands.add_parser("usage", help="print a usage report from the metered records")
    usage.add_argument(
        "--group-by", default="team,model", help="any of team,key,model,provider,region,batch,day"
    )
    usage.add_argument("--start", help="first day, YYYY-MM-DD (UTC)")
    usage.add_argument("--end", help="day after the last, YYYY-MM-DD (UTC)")
    usage.add_argument("--team", help="only this team id")
    usage.add_argument("--key", help="only this key id")
    usage.add_argument("--model")
    usage.add_argument("--provider")
    usage.add_argument("--batch")
    usage.add_argument("--format", choices=("table", "csv", "json"), default="table")
    usage.set_defaults(func=cmd_usage)
