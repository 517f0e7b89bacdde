"""`python -m bench.usage_scale [--records N | --ten-million] [--runs N] [--reuse]` (`make bench-usage`).

Loads the records into usage_records' month partitions (unless `--reuse` finds them loaded; 1M by
default, `--ten-million` for the production-sized run, several minutes of loading), then prints,
each against its target:
the server time of every report query, of the usage endpoints and of every console page (median
and p95 over `--runs` runs), and the usage writer's records/s with the daily totals kept and
without them."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

from sqlalchemy import text

from bench.scheduling.figures import Figure, context, percentile, table, tally
from bench.usage_scale import pages, stack
from bench.usage_scale.dataset import DAYS, Tenant, events
from bench.usage_scale.dataset import day_zero as first_day
from bench.usage_scale.queries import queries, timed
from gateway.db.session import create_engine, session_factory
from gateway.metering.storage.partitions import DEFAULT_PARTITION

QUERY_TARGET_MS = 100.0  # "well under" the pages' 300 ms (and the 200 ms asked of the month's report)
PROGRESS_EVERY = 1_000_000  # records, between the load's progress lines
PAGE_TARGET_MS = 300.0
WRITER_RECORDS = 100_000
WRITER_ROUNDS = 2


def _spread(scenario: str, name: str, times: list[float], target_ms: float) -> Figure:
    median, p95 = percentile(times, 50), percentile(times, 95)
    assert median is not None and p95 is not None
    return Figure(
        scenario, name, f"p95 < {target_ms:.0f} ms", f"{median:.1f} / {p95:.1f} ms", p95 < target_ms
    )


async def load(records: int, reuse: bool) -> tuple[stack.Sessions, list[Tenant], str, float, list[Figure]]:
    """The loaded database: its sessions, tenants, a team key's secret and the first day."""
    url = stack.database_url(stack.DATABASE)
    day_zero = first_day()
    if reuse:
        engine = create_engine(url)
        sessions = session_factory(engine)
        tenants, secret = await stack.stored_tenants(sessions)
        found = await stack.count(engine, "usage_records")
        print(f"reusing {stack.DATABASE}: {found:,} records", flush=True)
        return sessions, tenants, secret, day_zero, [context("load", "records (reused)", f"{found:,}")]
    url = await stack.recreate(stack.DATABASE)
    engine = create_engine(url)
    sessions = session_factory(engine)
    tenants, secret = await stack.create_tenants(sessions)
    partitions = await stack.create_partitions(sessions, day_zero, time.time())
    print(f"loading {records:,} records over {DAYS} days into {stack.DATABASE} ...", flush=True)
    written, writing_s = await stack.write(sessions, events(records, day_zero, tenants), progress=_progress())
    started = time.perf_counter()
    await stack.analyze(engine)
    analyzed_s = time.perf_counter() - started
    daily = await stack.count(engine, "usage_daily")
    return (
        sessions,
        tenants,
        secret,
        day_zero,
        [
            context(
                "load", "records written (the writer, daily totals kept)", f"{written:,} in {writing_s:.0f} s"
            ),
            context("load", "writer records/s while loading", f"{written / writing_s:,.0f}"),
            context("load", "usage_daily rows", f"{daily:,} ({written / max(daily, 1):.0f} records each)"),
            context("load", "month partitions made for the records", f"{len(partitions)}"),
            context(
                "load",
                "records in the DEFAULT partition",
                f"{await stack.count(engine, DEFAULT_PARTITION):,}",
            ),
            context("load", "VACUUM ANALYZE after the load", f"{analyzed_s:.1f} s"),
        ],
    )


def _progress() -> Callable[[int, float], None]:
    shown = [0]

    def show(written: int, seconds: float) -> None:
        if written - shown[0] >= PROGRESS_EVERY:
            shown[0] = written
            print(f"  {written:,} records, {written / seconds:,.0f}/s writing", flush=True)

    return show


async def report_figures(
    sessions: stack.Sessions, tenants: list[Tenant], day_zero: float, runs: int
) -> list[Figure]:
    figures = []
    for query in queries(tenants, datetime.now(UTC), day_zero):
        figures.append(
            _spread("reports", query.name, await timed(query.run, sessions, runs), QUERY_TARGET_MS)
        )
        print(f"  {figures[-1].name}: {figures[-1].measured}", flush=True)
    return figures


async def page_figures(tenants: list[Tenant], secret: str, day_zero: float, runs: int) -> list[Figure]:
    now = datetime.now(UTC)
    batch_id = f"batch-03-{int(day_zero // 86_400) + 40}-1"
    figures = []
    async with pages.app_client(stack.database_url(stack.DATABASE)) as client:
        for page in pages.api_pages(tenants, now):
            times = await pages.timed_page(client, page, runs, team_secret=secret)
            figures.append(_spread("api", page.name, times, QUERY_TARGET_MS))
        if not pages.console_exists():
            return [*figures, context("console", "page timing", "awaits the console (gateway/console/)")]
        for team_view in (False, True):
            await pages.sign_in(client, secret if team_view else pages.ADMIN_KEY)
            for page in pages.console_pages(tenants, now, batch_id):
                if page.team_key == team_view:
                    times = await pages.timed_page(client, page, runs, team_secret=secret)
                    figures.append(_spread("console", page.name, times, PAGE_TARGET_MS))
    return figures


async def writer_figures(records: int) -> list[Figure]:
    """The writer's records/s into a fresh database's month partitions, with the daily totals'
    triggers on and off, alternately, WRITER_ROUNDS times each."""
    engine = create_engine(await stack.recreate(stack.WRITER_DATABASE))
    sessions = session_factory(engine)
    tenants, _ = await stack.create_tenants(sessions)
    await stack.create_partitions(sessions, first_day(), time.time())
    rates: dict[bool, list[float]] = {True: [], False: []}
    for round_no in range(WRITER_ROUNDS):
        for kept in (True, False):
            async with engine.begin() as connection:
                await connection.execute(text("TRUNCATE usage_records"))  # and, by its trigger, usage_daily
                await connection.execute(
                    text(f"ALTER TABLE usage_records {'ENABLE' if kept else 'DISABLE'} TRIGGER USER")
                )
            written, seconds = await stack.write(
                sessions, events(records, first_day(), tenants, seed=round_no)
            )
            rates[kept].append(written / seconds)
    async with engine.begin() as connection:
        await connection.execute(text("ALTER TABLE usage_records ENABLE TRIGGER USER"))
    await engine.dispose()
    with_daily, without = (sum(rates[kept]) / len(rates[kept]) for kept in (True, False))
    return [
        context(
            "writer",
            f"records/s into month partitions, daily totals kept ({records:,} records, "
            f"mean of {WRITER_ROUNDS})",
            f"{with_daily:,.0f}",
        ),
        context(
            "writer",
            f"records/s, triggers disabled ({records:,} records, mean of {WRITER_ROUNDS})",
            f"{without:,.0f}",
        ),
        context(
            "writer",
            "cost of keeping the daily totals",
            f"{(1 - with_daily / without) * 100:.0f}% of the rate",
        ),
    ]


async def main(args: argparse.Namespace) -> list[Figure]:
    sessions, tenants, secret, day_zero, figures = await load(args.records, args.reuse)
    print(table(figures), flush=True)
    print(f"\nreport queries ({args.runs} runs each; median / p95):", flush=True)
    figures += await report_figures(sessions, tenants, day_zero, args.runs)
    print("\nendpoints and console pages ...", flush=True)
    figures += await page_figures(tenants, secret, day_zero, args.runs)
    if not args.skip_writer:
        print(f"\nthe writer, {args.writer_records:,} records a round ...", flush=True)
        figures += await writer_figures(args.writer_records)
    return figures


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.usage_scale", description=__doc__)
    parser.add_argument(
        "--records", type=int, default=1_000_000, help="usage records to load (default 1,000,000)"
    )
    parser.add_argument(
        "--ten-million",
        action="store_const",
        const=10_000_000,
        dest="records",
        help="load 10,000,000 records",
    )
    parser.add_argument("--runs", type=int, default=20, help="timed runs of each query and page (default 20)")
    parser.add_argument("--reuse", action="store_true", help=f"time the {stack.DATABASE} database as it is")
    parser.add_argument("--writer-records", type=int, default=WRITER_RECORDS, help="records per writer round")
    parser.add_argument("--skip-writer", action="store_true", help="leave out the writer's rates")
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    results = asyncio.run(main(arguments))
    print(f"\n# usage at scale\n\n{table(results)}\n\n{tally(results)}")
