"""The reconciliation page: the admin sees every provider's recent days, the differences past the
threshold marked and sized; a team's session is refused."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.reconciliation.comparison import Finding, Measure
from gateway.reconciliation.records import save_day
from tests.unit.auth.records import add_key, add_team
from tests.unit.console.auth.test_sign_in import page, sign_in
from tests.unit.console.conftest import ADMIN_KEY, ConsoleProcess


def finding(day: date, provider: str, measure: Measure, gateway: str, reported: str, share: float) -> Finding:
    difference = Decimal(reported) - Decimal(gateway)
    return Finding(day, provider, "gpt-a", "default", measure, Decimal(gateway), Decimal(reported), difference,
                   share, abs(share) > 0.01)  # fmt: skip


async def test_the_admin_sees_each_providers_days(
    console_process: ConsoleProcess, sessions: async_sessionmaker[AsyncSession]
) -> None:
    yesterday = datetime.now(UTC).date() - timedelta(days=1)
    async with sessions.begin() as session:
        await save_day(session, yesterday, "up-openai", [
            finding(yesterday, "up-openai", Measure.OUTPUT, "960", "1000", 0.04),
            finding(yesterday, "up-openai", Measure.COST, "0.5", "0.5", 0.0),
        ], datetime.now(UTC))  # fmt: skip
        await save_day(session, yesterday, "up-anthropic", [
            finding(yesterday, "up-anthropic", Measure.INPUT, "10", "10", 0.0)
        ], datetime.now(UTC))  # fmt: skip
    async with console_process() as client:
        sid = await sign_in(client, ADMIN_KEY)
        shown = await page(client, sid, "/ui/reconciliation")
        assert shown.status_code == 200, shown.text
        text = shown.text
        assert f'data-day="{yesterday}" data-provider="up-openai"' in text
        assert f'data-day="{yesterday}" data-provider="up-anthropic"' in text
        assert "1 past the threshold" in text and "agrees" in text
        assert 'data-measure="output" class="exceeded"' in text
        assert "<strong>4.0%</strong>" in text and ">40<" in text
        only = await page(client, sid, "/ui/reconciliation?provider=up-anthropic")
        assert 'data-provider="up-openai"' not in only.text


async def test_a_team_session_is_refused(
    console_process: ConsoleProcess, sessions: async_sessionmaker[AsyncSession]
) -> None:
    team = await add_team(sessions, "research")
    _, secret = await add_key(sessions, team.id)
    async with console_process() as client:
        reply = await client.post("/ui/login", data={"key": secret, "next": "/ui/usage"})
        sid = reply.headers["set-cookie"].split(";")[0].split("=", 1)[1]
        refused = await page(client, sid, "/ui/reconciliation")
        assert refused.status_code == 403
