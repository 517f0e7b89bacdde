"""Reports take a team by its name wherever they take its id, and show names: `gateway usage --team
NAME` (the real command, its terminal table), `/admin/usage?team=NAME` and `?team_id=NAME`; a query
parameter an endpoint does not take is a 400 naming it, never a report of every team."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from tests.e2e.conftest import Stack
from tests.support.gateway import REPO, Team

CHAT = {"model": "chat", "messages": [{"role": "user", "content": "usage by name"}]}


def served_team(stack: Stack, name: str) -> Team:
    team = stack.new_team(name)
    stack.client(team.key).chat.completions.create(**CHAT)  # type: ignore[call-overload]
    return team


def usage_cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"GATEWAY_DATABASE_URL": stack.gateway.env["GATEWAY_DATABASE_URL"]}
    command = [sys.executable, "-m", "gateway.cli", "usage", *args]
    finished = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    print(finished.stdout, finished.stderr)
    return finished


def test_the_usage_command_takes_and_shows_team_names(stack: Stack) -> None:
    research = served_team(stack, f"research-{os.getpid()}")
    served_team(stack, f"other-{os.getpid()}")
    by_id = stack.usage(team_id=research.id, group_by="team")
    assert [row["requests"] for row in by_id] == [1]

    named = usage_cli(stack, "--team", f"research-{os.getpid()}", "--group-by", "team")
    assert named.returncode == 0, named.stderr
    header, *rows = [
        line for line in named.stdout.splitlines() if line.strip() and not set(line) <= {"-", " ", "+"}
    ]
    assert header.split()[0] == "team"
    assert len(rows) == 1 and rows[0].split()[:2] == [f"research-{os.getpid()}", "1"]
    assert research.id not in named.stdout

    unknown = usage_cli(stack, "--team", "no-such-team")
    assert unknown.returncode == 1 and "no-such-team" in unknown.stderr


def test_the_admin_report_takes_a_team_name(stack: Stack) -> None:
    name = f"research-api-{os.getpid()}"
    team = served_team(stack, name)
    by_id = stack.usage(team_id=team.id, group_by="team,model")
    assert by_id and by_id[0]["team_name"] == name
    assert (
        stack.admin.get("/admin/usage", params={"team": name, "group_by": "team,model"}).json()["data"]
        == by_id
    )
    assert (
        stack.admin.get("/admin/usage", params={"team_id": name, "group_by": "team,model"}).json()["data"]
        == by_id
    )
    missing = stack.admin.get("/admin/usage", params={"team": "no-such-team"})
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "team"


def test_a_team_key_names_its_own_team_only(stack: Stack) -> None:
    mine = served_team(stack, f"own-{os.getpid()}")
    other = stack.new_team(f"theirs-{os.getpid()}")
    headers = {"authorization": f"Bearer {mine.key}"}
    own = httpx.get(stack.base_url + "/gateway/usage", params={"team": f"own-{os.getpid()}"}, headers=headers)
    assert own.status_code == 200 and own.json()["data"]
    for named in (f"theirs-{os.getpid()}", other.id, "no-such-team"):
        refused = httpx.get(stack.base_url + "/gateway/usage", params={"team": named}, headers=headers)
        assert refused.status_code == 403, refused.text


def test_an_unknown_query_parameter_is_a_400_naming_it(stack: Stack) -> None:
    for path in ("/admin/usage", "/admin/usage/events", "/admin/teams", "/admin/keys"):
        reply = stack.admin.get(path, params={"teem": "research", "limitt": "2"})
        assert reply.status_code == 400, (path, reply.text)
        error = reply.json()["error"]
        assert error["code"] == "unknown_parameter" and error["param"] == "limitt"
        assert "`limitt`" in error["message"] and "`teem`" in error["message"]
    team = stack.new_team(f"params-{os.getpid()}")
    headers = {"authorization": f"Bearer {team.key}"}
    for path in ("/gateway/usage", "/files", "/batches", "/gateway/batches"):
        reply = httpx.get(stack.base_url + path, params={"teem": "x"}, headers=headers)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "teem", (path, reply.text)
    assert stack.admin.get("/admin/usage", params={"team_id": team.id}).status_code == 200
