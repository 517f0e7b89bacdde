"""Who may see and do what, in Chromium: a team key kept to its own team and off the admin pages,
forged cross-site posts refused, and the providers page the admin sees."""

from __future__ import annotations

import uuid

import pytest

from tests.browser.conftest import Shoot, SignIn
from tests.browser.stack import ADMIN_KEY, ConsoleStack, foreign_site, wait_until

pytestmark = pytest.mark.e2e

ADMIN_ONLY = "Admin only"
REFUSED = "Request refused"


def test_a_team_key_sees_neither_another_teams_data_nor_the_admin_pages(
    stack: ConsoleStack, sign_in: SignIn, shoot: Shoot
) -> None:
    mine, theirs = (
        stack.new_team(f"mine-{uuid.uuid4().hex[:6]}"),
        stack.new_team(f"theirs-{uuid.uuid4().hex[:6]}"),
    )
    their_batch = f"theirs-{uuid.uuid4().hex[:8]}"
    stack.client(theirs.key).chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "ours"}],
        extra_headers={"X-Gateway-Batch": their_batch},
    )
    stack.client(mine.key).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "mine"}]
    )
    stack.wait_for_requests(theirs.id, 1)
    stack.wait_for_requests(mine.id, 1)

    page = sign_in(mine.key)
    nav = page.locator("header nav").inner_text()
    assert "Providers" not in nav and "Teams" not in nav
    for path in ("/ui/teams", "/ui/providers", f"/ui/teams/{theirs.id}", f"/ui/keys/{theirs.key_id}"):
        reply = page.goto(stack.base_url + path)
        assert reply is not None and reply.status == 403, path
        assert page.locator("h1").inner_text() == ADMIN_ONLY
    shoot(page, "refused")

    page.goto(stack.base_url + f"/ui/batches?team={theirs.id}")  # asks for the other team: shown its own
    assert their_batch not in page.content() and theirs.id not in page.content()
    for path in (f"/ui/batches/{their_batch}", f"/ui/batches/{their_batch}?team={theirs.id}"):
        reply = page.goto(stack.base_url + path)
        assert reply is not None and reply.status == 404, path
    fragment = page.request.get(stack.base_url + f"/ui/fragments/jobs?team={theirs.id}")
    assert fragment.status == 200 and theirs.id not in fragment.text()

    admin = sign_in(ADMIN_KEY)  # the same batch, seen by the admin choosing that team
    admin.goto(stack.base_url + f"/ui/batches?team={theirs.id}")
    assert admin.locator(f'#batches-table tr[data-batch="{their_batch}"]').count() == 1


def forged_form(action: str, fields: dict[str, str]) -> str:
    inputs = "".join(f'<input type="hidden" name="{name}" value="{value}">' for name, value in fields.items())
    return f'<form method="post" action="{action}">{inputs}</form><script>document.forms[0].submit()</script>'


def team_exists(stack: ConsoleStack, name: str) -> bool:
    teams = stack.admin.get("/admin/teams", params={"limit": 200}).json()["data"]
    return any(team["name"] == name for team in teams)


def test_a_forged_cross_site_post_is_refused(stack: ConsoleStack, sign_in: SignIn) -> None:
    page = sign_in(ADMIN_KEY)
    page.goto(stack.base_url + "/ui/teams")
    token = page.locator('#new-team input[name="csrf_token"]').get_attribute("value")
    assert token

    # Another port of this host is the same site: the SameSite=Strict cookie goes along, so the
    # Origin check refuses it, with or without the session's own CSRF token.
    for fields in (
        {"name": f"forged-{uuid.uuid4().hex[:6]}"},
        {"name": f"forged-{uuid.uuid4().hex[:6]}", "csrf_token": token},
    ):
        with foreign_site(forged_form(stack.base_url + "/ui/teams", fields)) as attacker:
            page.goto(attacker)
            page.wait_for_url(stack.base_url + "/ui/teams")
            assert page.locator("h1").inner_text() == REFUSED
        assert not team_exists(stack, fields["name"])

    # From this origin but without the session's CSRF token: refused as well.
    name = f"forged-{uuid.uuid4().hex[:6]}"
    reply = page.request.post(
        stack.base_url + "/ui/teams", form={"name": name}, headers={"origin": stack.base_url}
    )
    assert reply.status == 403 and not team_exists(stack, name)

    # Both right: the same request goes through, so it was the checks that refused the others.
    name = f"genuine-{uuid.uuid4().hex[:6]}"
    reply = page.request.post(
        stack.base_url + "/ui/teams",
        form={"name": name, "csrf_token": token},
        headers={"origin": stack.base_url},
    )
    assert reply.ok and team_exists(stack, name)


def test_the_admin_sees_every_deployments_health(stack: ConsoleStack, sign_in: SignIn, shoot: Shoot) -> None:
    stack.new_team(f"health-{uuid.uuid4().hex[:6]}")
    page = sign_in(ADMIN_KEY)
    page.click("text=Providers")
    page.wait_for_url("**/ui/providers")
    listed = stack.admin.get("/admin/providers").json()["data"]
    assert {d["deployment"] for d in listed} == {"up/upstream-chat", "up/upstream-mini"}
    for deployment in listed:
        row = page.locator(f'#deployments tr[data-deployment="{deployment["deployment"]}"]')
        assert row.locator('td[data-field="circuit"]').inner_text() == deployment["circuit"] == "closed"
    replica = page.locator(f'#replicas tr[data-provider="up"][data-replica="{stack.upstream.base_url}/v1"]')
    wait_until(lambda: replica.count() == 1, "the provider's replica listed")
    assert replica.locator('td[data-field="queued"]').inner_text() == "0 / 0"
    shoot(page, "providers")
