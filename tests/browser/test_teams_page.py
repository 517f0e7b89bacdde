"""Teams and keys in Chromium, as the admin: create and edit a team with the forms, issue a key whose
secret is shown once and works with the openai SDK, revoke it and see the SDK refused."""

from __future__ import annotations

import uuid

import openai
import pytest

from tests.browser.conftest import Shoot, SignIn
from tests.browser.stack import ADMIN_KEY, ConsoleStack

pytestmark = pytest.mark.e2e


def test_the_admin_creates_and_edits_a_team(stack: ConsoleStack, sign_in: SignIn, shoot: Shoot) -> None:
    page = sign_in(ADMIN_KEY)
    page.click("text=Teams & keys")
    page.wait_for_url("**/ui/teams")
    name = f"research-{uuid.uuid4().hex[:6]}"
    form = page.locator("#new-team")
    form.locator('input[name="name"]').fill(name)
    form.locator('input[name="weight"]').fill("2")
    form.locator('input[name="rpm_limit"]').fill("600")
    form.locator('input[name="monthly_budget_usd"]').fill("250.50")
    form.locator("button[type=submit]").click()
    page.wait_for_url("**/ui/teams/team_*")
    team_id = page.url.rsplit("/", 1)[1]
    made = stack.admin.get(f"/admin/teams/{team_id}").json()
    assert (made["name"], made["weight"], made["rpm_limit"], made["monthly_budget_usd"]) == (
        name,
        2.0,
        600,
        "250.5",
    )

    edit = page.locator("#edit-team")
    edit.locator('input[name="weight"]').fill("3.5")
    edit.locator('input[name="allowed_models"]').fill("chat, chat-mini")
    edit.locator('input[name="monthly_budget_usd"]').fill("")  # cleared: no budget
    edit.locator("button[type=submit]").click()
    page.wait_for_url("**notice=team-saved")
    assert page.locator(".notice").inner_text() == "Team saved."
    edited = stack.admin.get(f"/admin/teams/{team_id}").json()
    assert (edited["weight"], edited["allowed_models"], edited["monthly_budget_usd"]) == (
        3.5,
        ["chat", "chat-mini"],
        None,
    )

    page.locator("#edit-team").locator('input[name="weight"]').fill("0")  # below the smallest share
    page.locator("#edit-team button[type=submit]").click()
    assert "weight" in page.locator(".error").inner_text()
    assert stack.admin.get(f"/admin/teams/{team_id}").json()["weight"] == 3.5, (
        "a refused edit changes nothing"
    )

    page.goto(stack.base_url + "/ui/teams")
    assert page.locator(f'#teams tr[data-team="{team_id}"]').inner_text().startswith(name)
    shoot(page, "teams")


def test_a_new_keys_secret_is_shown_once_and_revoking_it_locks_the_sdk_out(
    stack: ConsoleStack, sign_in: SignIn, shoot: Shoot
) -> None:
    team = stack.new_team(f"keys-{uuid.uuid4().hex[:6]}")
    page = sign_in(ADMIN_KEY)
    page.goto(stack.base_url + f"/ui/teams/{team.id}")
    form = page.locator("#new-key-form")
    form.locator('input[name="name"]').fill("ci-runner")
    form.locator('input[name="tpm_limit"]').fill("100000")
    form.locator("button[type=submit]").click()
    secret = page.locator("[data-secret]").inner_text().strip()
    assert secret.startswith("sk-gw-")
    shoot(page, "team")

    reply = stack.client(secret).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content

    page.goto(stack.base_url + f"/ui/teams/{team.id}")  # the team page once more: no secret on it
    assert secret not in page.content()
    row = page.locator(f'#keys tr[data-prefix="{secret[:12]}"]')
    assert row.locator('td[data-field="state"]').inner_text() == "active"

    row.locator("a").click()  # the key's own page: its limits
    page.wait_for_url("**/ui/keys/key_*")
    key_id = page.url.rsplit("/", 1)[1]
    page.locator('#edit-key input[name="rpm_limit"]').fill("30")
    page.locator('#edit-key input[name="tpm_limit"]').fill("")
    page.locator("#edit-key button[type=submit]").click()
    page.wait_for_url("**notice=key-saved")
    edited = stack.admin.get(f"/admin/keys/{key_id}").json()
    assert (edited["name"], edited["rpm_limit"], edited["tpm_limit"]) == ("ci-runner", 30, None)

    row = page.locator(f'#keys tr[data-prefix="{secret[:12]}"]')
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button", has_text="Revoke").click()
    page.wait_for_url("**notice=key-revoked")
    assert (
        page.locator(f'#keys tr[data-prefix="{secret[:12]}"] td[data-field="state"]').inner_text()
        == "revoked"
    )
    with pytest.raises(openai.AuthenticationError) as refused:
        stack.client(secret).chat.completions.create(
            model="chat", messages=[{"role": "user", "content": "hi"}]
        )
    assert refused.value.status_code == 401
    stack.client(team.key).models.list()  # the team's other key is untouched


def test_a_revoke_the_admin_declines_revokes_nothing(stack: ConsoleStack, sign_in: SignIn) -> None:
    team = stack.new_team(f"declined-{uuid.uuid4().hex[:6]}")
    page = sign_in(ADMIN_KEY)
    page.goto(stack.base_url + f"/ui/teams/{team.id}")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.locator(f'#keys tr[data-key="{team.key_id}"] button', has_text="Revoke").click()
    page.wait_for_load_state("networkidle")
    assert "notice=" not in page.url, "the form was not sent"
    assert stack.admin.get(f"/admin/keys/{team.key_id}").json()["revoked_at"] is None
    stack.client(team.key).models.list()
