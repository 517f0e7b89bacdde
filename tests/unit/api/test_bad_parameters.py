"""Bad query, path and body parameters through the app `gateway serve` runs, on SQLite; and what the
log says of a database error (never the statement's values)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgspec
import pytest
import structlog
from sqlalchemy import text

from gateway.api.front import error_replies
from gateway.db.session import create_engine
from tests.unit.api.bad_parameters import ADMIN_KEY, MARKER, Lines, gateway, misanswered

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


async def test_every_bad_parameter_is_a_400_naming_it(tmp_path: Path) -> None:
    async with gateway(f"sqlite:///{tmp_path}/gateway.db") as gw:
        assert await misanswered(gw) == []


async def test_good_parameters_still_answer(tmp_path: Path) -> None:
    async with gateway(f"sqlite:///{tmp_path}/gateway.db") as gw:
        team = {"Authorization": f"Bearer {gw.team_key}"}
        report = {"start": "2026-01-01", "end": "2026-02-01T00:00:00+01:00", "group_by": "model,day"}
        assert (await gw.client.get("/admin/usage", params=report, headers=ADMIN)).status_code == 200
        csv = await gw.client.get("/v1/gateway/usage", params={**report, "format": "csv"}, headers=team)
        assert csv.status_code == 200
        assert csv.text.startswith("model,day,requests")
        events = await gw.client.get("/admin/usage/events", params={"limit": "1000"}, headers=ADMIN)
        assert events.json() == {"object": "list", "data": [], "next_cursor": None}
        keys = await gw.client.get(
            "/admin/keys", params={"team_id": gw.team_id, "limit": "200"}, headers=ADMIN
        )
        assert len(keys.json()["data"]) == 1


async def test_events_page_through_their_cursor(tmp_path: Path) -> None:
    async with gateway(f"sqlite:///{tmp_path}/gateway.db") as gw:
        team = {"Authorization": f"Bearer {gw.team_key}"}
        chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
        sent = [(await gw.client.post("/v1/chat/completions", json=chat, headers=team)) for _ in range(2)]
        async with asyncio.timeout(10):  # the writer flushes every 0.2 s
            while (await gw.client.get("/admin/usage", headers=ADMIN)).json()["data"][0]["requests"] < 2:
                await asyncio.sleep(0.05)
        params = {"team_id": gw.team_id, "model": "gpt-4o-mini", "limit": "1"}
        first = (await gw.client.get("/admin/usage/events", params=params, headers=ADMIN)).json()
        cursor = {**params, "cursor": first["next_cursor"]}
        second = (await gw.client.get("/admin/usage/events", params=cursor, headers=ADMIN)).json()
    seen = [page["data"][0]["request_id"] for page in (first, second)]
    assert sorted(seen) == sorted(response.headers["x-request-id"] for response in sent)
    assert second["next_cursor"] is None


async def test_the_report_parameters_are_in_the_openapi_document(tmp_path: Path) -> None:
    async with gateway(f"sqlite:///{tmp_path}/gateway.db") as gw:
        paths = (await gw.client.get("/schema/openapi.json")).json()["paths"]
    listed = {p["name"] for p in paths["/admin/usage/events"]["get"]["parameters"]}
    assert {"start", "end", "group_by", "team_id", "key_id", "model", "provider", "batch"} <= listed
    assert {"limit", "cursor"} <= listed
    assert "format" in {p["name"] for p in paths["/v1/gateway/usage"]["get"]["parameters"]}


async def test_a_database_error_is_logged_without_the_statements_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lines = Lines()
    rendered = [structlog.processors.add_log_level, structlog.processors.format_exc_info]
    monkeypatch.setattr(
        error_replies,
        "log",
        structlog.wrap_logger(lines, processors=[*rendered, structlog.processors.JSONRenderer()]),
    )
    url = f"sqlite:///{tmp_path}/gateway.db"
    async with gateway(url) as gw:
        engine = create_engine(url)
        async with engine.begin() as conn:  # the report's query now fails in the database
            await conn.execute(text("DROP TABLE usage_records"))
            await conn.execute(text("DROP TABLE usage_daily"))
        await engine.dispose()
        with caplog.at_level(logging.DEBUG):
            response = await gw.client.get("/admin/usage", params={"model": MARKER}, headers=ADMIN)

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    (line,) = [msgspec.json.decode(raw) for raw in lines.lines if "internal_error" in raw]
    assert line["error"] == "OperationalError"
    assert line["database_error"] == "OperationalError"
    assert "usage.py" in line["stack"]  # where it failed is still there
    assert MARKER not in "".join(lines.lines)
    assert MARKER not in caplog.text
