"""The reconciliation page (`/ui/reconciliation`), for the admin only: each recent day's comparison
of the usage records with every provider's own usage and cost reports (gateway.reconciliation),
per model, tier and measure, the differences past the threshold marked. A provider's bill is every
team's, so a team's session is refused here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import groupby

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Template

from gateway.console.auth.sessions import Viewer
from gateway.console.rendering import page
from gateway.db.session import report_sessions
from gateway.reconciliation.records import recent_findings
from gateway.reconciliation.reports import reconcilable
from gateway.services import ServicesDependency

SHOWN_DAYS = 14


@get("/reconciliation")
async def reconciliation_page(
    services: ServicesDependency, admin: NamedDependency[Viewer], provider: FromQuery[str | None] = None
) -> Template:
    since = datetime.now(UTC).date() - timedelta(days=SHOWN_DAYS)
    async with report_sessions(services)() as session:
        rows = await recent_findings(session, since, provider or None)
    days = [(key, list(group)) for key, group in groupby(rows, key=lambda row: (row.day, row.provider))]
    catalog = services.settings.catalog
    return page(
        "reconciliation.html",
        admin,
        "reconciliation",
        days=days,
        providers=[p.name for p in catalog.providers if reconcilable(p)],
        provider=provider or "",
        threshold=catalog.reconciliation.threshold,
        shown_days=SHOWN_DAYS,
    )


RECONCILIATION_PAGE_HANDLERS = [reconciliation_page]
