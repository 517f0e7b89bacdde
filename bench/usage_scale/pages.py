"""The usage endpoints and the console's pages, served by the app `gateway serve` runs, in process
(Litestar's test client: no socket between the two), on the loaded database and without Redis.

A console page's time is the server's own, from its `Server-Timing` header (the console's
middleware: queries and rendering). The JSON and CSV endpoints send no such header; their time is
the in-process round trip, which is the server's time and the test client's, with no network."""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from litestar.testing import AsyncTestClient

from bench.stack import REPO
from bench.usage_scale.dataset import Tenant
from bench.usage_scale.queries import last_month
from gateway.server.asgi import serving_app
from gateway.settings import load_settings

ADMIN_KEY = "bench-usage-admin-secret"
_DURATION = re.compile(r"dur=([0-9.]+)")
Client = AsyncTestClient[Any]


@dataclass(frozen=True, slots=True)
class Page:
    name: str
    path: str
    params: dict[str, str]
    team_key: bool = False  # sent as the team key (the API) or signed in as the team (the console)


@asynccontextmanager
async def app_client(database_url: str) -> AsyncIterator[Client]:
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "PATH": os.environ.get("PATH", ""),
        }
    )
    async with AsyncTestClient(app=serving_app(settings)) as client:
        yield client


def console_exists() -> bool:
    return (REPO / "gateway" / "console" / "routes.py").is_file()


def api_pages(tenants: list[Tenant], now: datetime) -> list[Page]:
    start, end = (moment.date().isoformat() for moment in last_month(now))
    month = {"start": start, "end": end}
    return [
        Page("GET /admin/usage month by team, model", "/admin/usage", {**month, "group_by": "team,model"}),
        Page("GET /admin/usage month by day", "/admin/usage", {**month, "group_by": "day"}),
        Page(
            "GET /admin/usage six fields, CSV",
            "/admin/usage",
            {**month, "group_by": "team,key,model,provider,region,batch", "format": "csv"},
        ),
        Page("GET /admin/usage/events first page", "/admin/usage/events", {"limit": "100"}),
        Page("GET /admin/usage/events one team", "/admin/usage/events", {"team_id": tenants[3].team_id}),
        Page(
            "GET /v1/gateway/usage month by day, model",
            "/v1/gateway/usage",
            {**month, "group_by": "day,model"},
            True,
        ),
    ]


def console_pages(tenants: list[Tenant], now: datetime, batch_id: str) -> list[Page]:
    team = tenants[3].team_id
    ninety = {"start": (now - timedelta(days=89)).date().isoformat(), "end": now.date().isoformat()}
    return [
        Page("/ui/usage (last 30 days)", "/ui/usage", {}),
        Page("/ui/usage by team", "/ui/usage", {"group": "team"}),
        Page("/ui/usage by model", "/ui/usage", {"group": "model"}),
        Page("/ui/usage one team by model", "/ui/usage", {"team": team, "group": "model"}),
        Page("/ui/usage 90 days by team", "/ui/usage", {**ninety, "group": "team"}),
        Page("/ui/usage.csv by model", "/ui/usage.csv", {"group": "model"}),
        Page("/ui/batches", "/ui/batches", {"team": team}),
        Page("/ui/fragments/jobs", "/ui/fragments/jobs", {"team": team}),
        Page("/ui/batches/<id>", f"/ui/batches/{batch_id}", {"team": team}),
        Page("/ui/providers", "/ui/providers", {}),
        Page("/ui/teams", "/ui/teams", {}),
        Page("/ui/teams/<id>", f"/ui/teams/{team}", {}),
        Page("/ui/usage as a team", "/ui/usage", {"group": "model"}, True),
    ]


async def sign_in(client: Client, key: str) -> None:
    """The console's sign-in: a 303 with the session cookie, which the client keeps."""
    client.cookies.clear()
    response = await client.post("/ui/login", data={"key": key}, follow_redirects=False)
    if response.status_code != 303 or "gateway_console" not in client.cookies:
        raise RuntimeError(f"console sign-in answered {response.status_code}")


async def timed_page(client: Client, page: Page, runs: int, *, team_secret: str) -> list[float]:
    """Milliseconds of each of `runs` requests after one untimed one; a console page's from its
    Server-Timing header, an endpoint's from the in-process round trip."""
    headers = {}
    if not page.path.startswith("/ui"):
        headers = {"Authorization": f"Bearer {team_secret if page.team_key else ADMIN_KEY}"}
    times = []
    for run in range(runs + 1):
        started = time.perf_counter()
        response = await client.get(page.path, params=page.params, headers=headers)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise RuntimeError(f"{page.path} answered {response.status_code}: {response.text[:200]}")
        timing = _DURATION.search(response.headers.get("server-timing", ""))
        if run:
            times.append(float(timing.group(1)) if timing else elapsed)
    return times
