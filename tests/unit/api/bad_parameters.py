"""Requests whose parameters no query may carry, and the app to send them to, on SQLite or PostgreSQL;
and `Lines`, a logger keeping what it is given, to read what the log says of a failed statement.

Each is answered 400 `invalid_request_error` naming the parameter. Unchecked, a NUL byte would
reach PostgreSQL (which refuses it in text) and a moment past the year 9999 in UTC would reach
`astimezone`: both 500s.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Litestar
from litestar.testing import AsyncTestClient

from gateway.db.migrate import upgrade_head_async
from gateway.db.session import create_engine, session_factory
from gateway.server.asgi import serving_app
from gateway.settings import load_settings
from tests.support.gateway import REPO
from tests.unit.auth.records import add_key, add_team

ADMIN_KEY = "admin-parameters-secret"
MARKER = "model-that-must-stay-out-of-the-log"  # a statement's value, to look for in the log
Client = AsyncTestClient[Litestar]

BAD_TEXT = ["\x00", "model\x00", "a\x01b", "tab\there", "new\nline", "\x1f", "\x7f", "x" * 513]
BAD_MOMENTS = [
    "2026-02-30",
    "2026-13-01",
    "99999-01-01",
    "2026-01-01T25:00:00",
    "0001-01-01T00:00:00+05:00",  # before the year 1 in UTC
    "9999-12-31T23:59:59-05:00",  # after the year 9999 in UTC
    "2026-01-01\x00",
    "yesterday",
]
BAD_LIMITS = ["0", "-1", "x", "1.5", "", "\x00", "9" * 5000, "\u0661\u0660"]  # the last: Arabic-Indic digits
REPORT_FILTERS = ["team_id", "key_id", "model", "provider", "batch", "group_by"]
REPORTS = ["/admin/usage", "/admin/usage/events", "/v1/gateway/usage"]


@dataclass(frozen=True, slots=True)
class Bad:
    method: str
    path: str
    param: str  # what the 400 must name
    params: dict[str, str] | None = None
    body: dict[str, Any] | None = None
    team: bool = False  # sent with the team key rather than the admin key


def bad_requests(team_id: str) -> list[Bad]:
    cases: list[Bad] = []
    for path in REPORTS:
        team = path.startswith("/v1/")
        for name in REPORT_FILTERS:
            cases += [Bad("GET", path, name, {name: value}, team=team) for value in BAD_TEXT]
        for name in ("start", "end"):
            cases += [Bad("GET", path, name, {name: value}, team=team) for value in BAD_MOMENTS]
        if path != "/admin/usage/events":
            cases += [Bad("GET", path, "format", {"format": value}, team=team) for value in ("xml", "\x00")]
    events = "/admin/usage/events"
    cases += [Bad("GET", events, "limit", {"limit": value}) for value in [*BAD_LIMITS, "1001"]]
    cases += [Bad("GET", events, "cursor", {"cursor": value}) for value in [*BAD_TEXT, "not-a-cursor"]]
    cases += [Bad("GET", events, "cursor", {"cursor": cursor}) for cursor in _forged_cursors()]
    for path in ("/admin/teams", "/admin/keys"):
        cases += [Bad("GET", path, "limit", {"limit": value}) for value in [*BAD_LIMITS, "201"]]
        cases += [Bad("GET", path, "cursor", {"cursor": value}) for value in BAD_TEXT]
    cases += [Bad("GET", "/admin/keys", "team_id", {"team_id": value}) for value in BAD_TEXT]
    for method in ("GET", "PATCH", "DELETE"):
        body = {} if method == "PATCH" else None
        cases += [Bad(method, "/admin/teams/a%00b", "team_id", body=body)]
        cases += [Bad(method, "/admin/keys/a%00b", "key_id", body=body)]
    cases += [
        Bad("POST", "/admin/teams", "name", body={"name": "research\x00"}),
        Bad("POST", "/admin/teams", "allowed_models[0]", body={"name": "r", "allowed_models": ["a\x00"]}),
        Bad("POST", "/admin/teams", "allowed_regions[0]", body={"name": "r", "allowed_regions": ["\x1f"]}),
        Bad("PATCH", f"/admin/teams/{team_id}", "name", body={"name": "renamed\n"}),
        Bad("POST", "/admin/keys", "team_id", body={"team_id": "team\x00", "name": "k"}),
        Bad("POST", "/admin/keys", "name", body={"team_id": team_id, "name": "k\x00"}),
    ]
    return cases


def _forged_cursors() -> list[str]:
    """Cursors of the right encoding whose content no page could have ended on."""
    payloads = [["2026-01-01T00:00:00+00:00", "req\x00"], ["9999-12-31T23:59:59-05:00", "req_1"]]
    return [base64.urlsafe_b64encode(msgspec.json.encode(p)).decode().rstrip("=") for p in payloads]


@dataclass(frozen=True, slots=True)
class Gateway:
    client: Client
    team_id: str
    team_key: str

    def headers(self, bad: Bad) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.team_key if bad.team else ADMIN_KEY}"}

    async def send(self, bad: Bad) -> Any:
        return await self.client.request(
            bad.method, bad.path, params=bad.params, json=bad.body, headers=self.headers(bad)
        )


@asynccontextmanager
async def gateway(database_url: str) -> AsyncIterator[Gateway]:
    """The app `gateway serve` runs, on a migrated database with one team and one key; no Redis."""
    settings = load_settings(
        {
            "GATEWAY_CONFIG": str(REPO / "config" / "gateway.yaml"),
            "GATEWAY_DATABASE_URL": database_url,
            "GATEWAY_ADMIN_KEY": ADMIN_KEY,
            "PATH": os.environ.get("PATH", ""),
        }
    )
    await upgrade_head_async(database_url)
    engine = create_engine(database_url)
    try:
        sessions = session_factory(engine)
        team = await add_team(sessions, "parameters")
        _, secret = await add_key(sessions, team.id, "parameters-key")
    finally:
        await engine.dispose()
    async with AsyncTestClient(app=serving_app(settings)) as client:
        yield Gateway(client, team.id, secret)


async def misanswered(gateway: Gateway) -> list[str]:
    """Every bad request not answered 400 invalid_request_error naming its parameter."""
    wrong = []
    for bad in bad_requests(gateway.team_id):
        response = await gateway.send(bad)
        json = response.headers.get("content-type", "").startswith("application/json")
        error = response.json().get("error") or {} if json else {}
        if (response.status_code, error.get("type"), error.get("param")) != (
            400,
            "invalid_request_error",
            bad.param,
        ):
            wrong.append(
                f"{bad.method} {bad.path} {bad.params or bad.body!r}: {response.status_code} {error}"
            )
    return wrong


class Lines:
    """A structlog logger keeping the rendered lines it is given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def msg(self, line: str) -> None:
        self.lines.append(line)

    error = warning = info = debug = msg
