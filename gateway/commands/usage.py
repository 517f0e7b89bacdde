"""`gateway usage`: the usage report as a table (or CSV/JSON) in the terminal, from the records, teams
named by their names (`--team` takes a name or an id);
`gateway usage partitions`: usage_records' month partitions created ahead and expired ones dropped
(gateway.metering.storage.upkeep), as the usage writer does daily;
`gateway usage reconcile`: a day's records beside each provider's own usage and cost reports
(gateway.reconciliation), stored as the daily run stores them; exit 3 past the threshold."""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import httpx
import msgspec
import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.commands.database import run_in_transaction
from gateway.commands.terminal import render_table
from gateway.db.teams import reported_team_id, team_names
from gateway.metering.pricing import money_str
from gateway.metering.reports.usage import (
    ROW_FIELD,
    UsageQuery,
    UsageRow,
    parse_group_by,
    report_csv,
    usage_report,
)
from gateway.metering.storage.partitions import is_partitioned, month_partitions
from gateway.metering.storage.retention import records_from
from gateway.metering.storage.upkeep import UsageUpkeep, keep_usage_storage
from gateway.reconciliation.comparison import Finding, Measure
from gateway.reconciliation.daily import REPORT_TIMEOUT_S, reconcile_provider
from gateway.reconciliation.reports import ProviderReportError, reconcilable
from gateway.settings import Settings

PAST_THRESHOLD = 3  # `gateway usage reconcile`: a difference past the threshold
TOTALS = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "cache_write_tokens")


def _day(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    return datetime.combine(date.fromisoformat(raw), datetime.min.time(), UTC)


def cmd_usage(args: argparse.Namespace) -> int:
    async def work(_: Settings, session: AsyncSession) -> int:
        team_id = await reported_team_id(session, args.team, param="--team") if args.team else None
        query = UsageQuery(
            start=_day(args.start),
            end=_day(args.end),
            group_by=parse_group_by(args.group_by),
            team_id=team_id,
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
            names = await team_names(session, {row.team_id for row in rows if row.team_id})
            print(_table(rows, query, names))
        return 0

    return run_in_transaction(work, report=True)


def _table(rows: list[UsageRow], query: UsageQuery, names: dict[str, str]) -> str:
    """The report for a person: a team by its name (its id when it has none), in a `team` column."""
    columns = [ROW_FIELD[field] for field in query.group_by]

    def shown(row: UsageRow, column: str) -> str:
        value = getattr(row, column)
        if column == "team_id" and value:
            value = names.get(value, value)
        return str(value or "-")

    table = [
        [shown(row, c) for c in columns]
        + [str(getattr(row, t)) for t in TOTALS]
        + [money_str(row.cost), money_str(row.saving)]
        for row in rows
    ]
    headers = ["team" if c == "team_id" else c for c in columns]
    return render_table([*headers, *TOTALS, "cost_usd", "saving_usd"], table)


def cmd_usage_partitions(args: argparse.Namespace) -> int:
    async def work(settings: Settings, session: AsyncSession) -> int:
        if not await is_partitioned(session):
            print("usage_records is not partitioned here (SQLite, or a database before migration 0008)")
            return 0
        ahead = settings.usage_partitions_ahead if args.ahead is None else args.ahead
        sessions = async_sessionmaker(session.bind, expire_on_commit=False)
        done = await keep_usage_storage(sessions, UsageUpkeep(ahead, settings.usage_retention_months))
        for name in done.created:
            print(f"created {name}")
        for name in done.dropped:
            print(f"dropped {name} (its days stay in usage_daily)")
        months = await month_partitions(session)
        if months:
            print(f"month partitions: {months[0].name} .. {months[-1].name} ({len(months)})")
        kept_from = await records_from(session)
        if kept_from is not None:
            print(f"records kept from {kept_from.isoformat()}; whole days before that from usage_daily")
        return 0

    return run_in_transaction(work)


def cmd_usage_reconcile(args: argparse.Namespace) -> int:
    day = date.fromisoformat(args.day) if args.day else datetime.now(UTC).date() - timedelta(days=1)

    async def work(settings: Settings, session: AsyncSession) -> int:
        catalog = settings.catalog
        if args.threshold is not None:
            reconciliation = msgspec.structs.replace(catalog.reconciliation, threshold=args.threshold)
            catalog = msgspec.structs.replace(catalog, reconciliation=reconciliation)
        providers = [p for p in catalog.providers if reconcilable(p) and args.provider in (None, p.name)]
        if not providers:
            print(
                "no provider to reconcile: an openai or anthropic provider needs admin_api_key",
                file=sys.stderr,
            )
            return 1
        # the table is the answer on stdout; the warnings past the threshold go to stderr
        log = structlog.wrap_logger(
            structlog.PrintLogger(sys.stderr),
            wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        )
        findings: list[Finding] = []
        failed = False
        async with httpx.AsyncClient(timeout=httpx.Timeout(REPORT_TIMEOUT_S)) as http:
            for provider in providers:
                try:
                    async with session.begin_nested():
                        findings += await reconcile_provider(session, catalog, provider, day, http, log)
                except ProviderReportError as exc:
                    print(f"gateway: {provider.name}: {exc}", file=sys.stderr)
                    failed = True
        print(_reconciliation_table(findings, catalog.reconciliation.threshold))
        if any(f.exceeded for f in findings):
            return PAST_THRESHOLD
        return 1 if failed else 0

    return run_in_transaction(work)


def _reconciliation_table(findings: list[Finding], threshold: float) -> str:
    def amount(finding: Finding, value: Decimal) -> str:
        return money_str(value) if finding.measure is Measure.COST else str(int(value))

    rows = [
        [
            f.day.isoformat(),
            f.provider,
            f.model,
            f.tier,
            f.measure.value,
            amount(f, f.gateway),
            amount(f, f.reported),
            amount(f, f.difference),
            f"{f.share:+.2%}",
            "PAST" if f.exceeded else "ok",
        ]
        for f in findings
    ]
    headers = [
        "day",
        "provider",
        "model",
        "tier",
        "measure",
        "gateway",
        "provider_report",
        "difference",
        "share",
    ]
    return render_table([*headers, f"threshold {threshold:.2%}"], rows)


def add_usage_parser(commands: argparse._SubParsersAction) -> None:
    usage = commands.add_parser("usage", help="print a usage report from the metered records")
    usage.add_argument(
        "--group-by",
        default="team,model,tier",
        help="any of team,key,model,provider,region,batch,day,tier (tier: the service tier served)",
    )
    usage.add_argument("--start", help="first day, YYYY-MM-DD (UTC)")
    usage.add_argument("--end", help="day after the last, YYYY-MM-DD (UTC)")
    usage.add_argument("--team", help="only this team: its name or id")
    usage.add_argument("--key", help="only this key id")
    usage.add_argument("--model")
    usage.add_argument("--provider")
    usage.add_argument("--batch")
    usage.add_argument("--format", choices=("table", "csv", "json"), default="table")
    usage.set_defaults(func=cmd_usage)
    actions = usage.add_subparsers(title="maintenance", metavar="{partitions,reconcile}")
    partitions = actions.add_parser(
        "partitions",
        help="create usage_records' month partitions ahead and drop expired ones (PostgreSQL)",
    )
    partitions.add_argument(
        "--ahead",
        type=int,
        choices=range(0, 61),
        metavar="N",
        help="months after the current one (default GATEWAY_USAGE_PARTITIONS_AHEAD, 3)",
    )
    partitions.set_defaults(func=cmd_usage_partitions)
    reconcile = actions.add_parser(
        "reconcile",
        help="compare a day's records with each provider's own usage and cost reports (admin_api_key); "
        "exit 3 when a difference is past the threshold",
    )
    reconcile.add_argument("--day", help="the UTC day, YYYY-MM-DD (default: yesterday)")
    reconcile.add_argument("--provider", help="only this provider (its catalog name)")
    reconcile.add_argument(
        "--threshold", type=float, help="the share past which a difference fails (default: the catalog's)"
    )
    reconcile.set_defaults(func=cmd_usage_reconcile)
