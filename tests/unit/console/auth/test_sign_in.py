"""Sessions as the browser sees them, on console apps standing for gateway processes: the cookie
names a session and holds nothing of a key; a sign-out ends it in every process sharing Redis; a
cookie naming no session (made up, forged, of the old signed kind) is the sign-in page, never an
error; a revoked key or a changed admin key ends its sessions."""

from __future__ import annotations

import json

import fakeredis
import httpx
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.auth.secrets import hash_secret
from gateway.console.auth.session_state import NAMESPACE
from gateway.console.auth.sessions import COOKIE, SESSION_ID
from gateway.db import keys
from tests.unit.auth.records import add_key, add_team
from tests.unit.console.conftest import ADMIN_KEY, CSRF, ConsoleProcess

Client = AsyncTestClient[Litestar]


async def sign_in(client: Client, key: str) -> str:
    """The session cookie's value after a good sign-in."""
    reply = await client.post("/ui/login", data={"key": key, "next": "/ui/teams"})
    assert reply.status_code == 303 and reply.headers["location"] == "/ui/teams", reply.text
    return session_of(reply)


def session_of(reply: httpx.Response) -> str:
    cookie = reply.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    return cookie.split(";")[0].split("=", 1)[1]


async def page(client: Client, sid: str, path: str = "/ui/teams") -> httpx.Response:
    client.cookies.clear()
    return await client.get(path, headers={"cookie": f"{COOKIE}={sid}"})


def sent_to_sign_in(reply: httpx.Response, *, ended: bool = True) -> bool:
    location = reply.headers.get("location", "")
    return (
        reply.status_code == 303 and location.startswith("/ui/login") and (("ended=1" in location) is ended)
    )


async def test_a_signed_out_session_is_refused_by_every_process_sharing_redis(
    console_process: ConsoleProcess,
) -> None:
    async with console_process() as here, console_process() as elsewhere:
        sid = await sign_in(here, ADMIN_KEY)
        shown = await page(elsewhere, sid)
        assert shown.status_code == 200 and 'data-role="admin"' in shown.text  # started here, good there
        [csrf] = CSRF.findall(shown.text)[:1]
        out = await here.post("/ui/logout", data={"csrf_token": csrf}, headers={"cookie": f"{COOKIE}={sid}"})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login?signed_out=1"
        assert sent_to_sign_in(await page(elsewhere, sid)) and sent_to_sign_in(await page(here, sid))


async def test_without_redis_a_session_is_the_process_own(console_process: ConsoleProcess) -> None:
    async with console_process(redis=False) as here, console_process(redis=False) as elsewhere:
        sid = await sign_in(here, ADMIN_KEY)
        assert (await page(here, sid)).status_code == 200
        assert sent_to_sign_in(await page(elsewhere, sid))


@pytest.mark.parametrize(
    "cookie",
    [
        "A" * 43,  # shaped like a session id, naming none
        "not-a-session",
        "eyJzaWQiOiJ4IiwiZXhwIjo5OTk5OTk5OTk5LCJhZG1pbl9tYXJrIjoieCJ9.c2lnbmF0dXJl",  # the old signed kind
        "../../etc/passwd",
        "x" * 4000,
        "null",
    ],
)
async def test_a_cookie_naming_no_session_is_the_sign_in_page(
    console_process: ConsoleProcess, cookie: str
) -> None:
    async with console_process() as client:
        reply = await page(client, cookie)
        assert sent_to_sign_in(reply)
        cleared = reply.headers["set-cookie"]
        assert cleared.startswith(f"{COOKIE}=;") or cleared.startswith(f'{COOKIE}="";')
        assert "Max-Age=0" in cleared
        login = await client.get(reply.headers["location"])
        assert login.status_code == 200 and "Your session has ended" in login.text


async def test_a_record_written_into_redis_without_the_secret_names_nobody(
    console_process: ConsoleProcess,
) -> None:
    async with console_process() as client:
        sid = await sign_in(client, ADMIN_KEY)
        redis = client.app.state.services.redis
        record = json.loads(await redis.get(f"{NAMESPACE}:{sid}"))
        forged = "B" * 43
        await redis.set(f"{NAMESPACE}:{forged}", json.dumps(record))  # another id, the same record
        assert sent_to_sign_in(await page(client, forged))
        longer = record | {"expires_at": record["expires_at"] + 3600}
        await redis.set(f"{NAMESPACE}:{sid}", json.dumps(longer))
        assert sent_to_sign_in(await page(client, sid))


async def test_the_cookie_and_the_store_hold_nothing_of_the_key(
    console_process: ConsoleProcess, sessions: async_sessionmaker[AsyncSession]
) -> None:
    team = await add_team(sessions, "research")
    key, secret = await add_key(sessions, team.id)
    async with console_process() as client:
        sid = await sign_in(client, secret)
        assert SESSION_ID.fullmatch(sid)
        stored = await client.app.state.services.redis.get(f"{NAMESPACE}:{sid}")
        record = json.loads(stored)
        assert (record["key_id"], record["team_id"]) == (key.id, team.id)
        for material in (secret, secret[6:], key.key_prefix, hash_secret(secret), ADMIN_KEY):
            assert material not in sid and material.encode() not in stored
        assert key.id not in sid
        admin_sid = await sign_in(client, ADMIN_KEY)
        admin_record = await client.app.state.services.redis.get(f"{NAMESPACE}:{admin_sid}")
        assert ADMIN_KEY.encode() not in admin_record and ADMIN_KEY not in admin_sid


async def test_a_revoked_keys_session_ends(
    console_process: ConsoleProcess, sessions: async_sessionmaker[AsyncSession]
) -> None:
    team = await add_team(sessions, "research")
    key, secret = await add_key(sessions, team.id)
    async with console_process() as client:
        sid = await sign_in(client, secret)
        refused = await page(client, sid)  # a team's session on an admin page: it is the team's
        assert refused.status_code == 403 and "Admin only" in refused.text
        assert (await page(client, sid, "/ui/login")).status_code == 303  # signed in already
        async with sessions.begin() as session:
            await keys.revoke_key(session, key.id)
        await client.app.state.services.key_cache.invalidate(key.key_hash)
        assert sent_to_sign_in(await page(client, sid))


async def test_a_changed_admin_key_ends_the_admin_sessions(console_process: ConsoleProcess) -> None:
    async with console_process() as before, console_process(admin_key="another-admin-key") as after:
        sid = await sign_in(before, ADMIN_KEY)
        assert sent_to_sign_in(await page(after, sid))


async def test_an_unreachable_redis_is_a_page_that_says_so(
    console_process: ConsoleProcess, redis_server: fakeredis.FakeServer
) -> None:
    async with console_process() as client:
        sid = await sign_in(client, ADMIN_KEY)
        redis_server.connected = False
        shown = await page(client, sid)
        assert shown.status_code == 503 and "Sessions are unavailable" in shown.text
        refused = await client.post("/ui/login", data={"key": ADMIN_KEY})
        assert refused.status_code == 503 and "cannot reach Redis" in refused.text
        assert "set-cookie" not in refused.headers
