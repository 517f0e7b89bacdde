"""The usage page in Chromium: what the openai SDK sent, read back off the charts, the totals, the
table and the CSV, for the admin (every team, grouped by team or model) and for a team key (its own
team only, whatever the URL asks)."""

from __future__ import annotations

import csv
import io
import uuid
from dataclasses import dataclass
from decimal import Decimal

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import Shoot, SignIn
from tests.browser.reading import chart, chart_tooltips, table_sum, tile
from tests.browser.stack import ADMIN_KEY, ConsoleStack, expected_cost, expected_saving, usd
from tests.support.gateway import Team

pytestmark = pytest.mark.e2e


@dataclass
class Sent:
    """What a team's requests came to, from the usage the SDK got back."""

    requests: int = 0
    prompt: int = 0
    cached: int = 0
    completion: int = 0
    cost: Decimal = Decimal(0)
    saving: Decimal = Decimal(0)

    @property
    def tokens(self) -> int:
        return self.prompt + self.completion

    def share(self) -> str:
        return f"{Decimal(self.cached) * 100 / self.prompt:.1f}%"


def send(
    stack: ConsoleStack,
    team: Team,
    model: str,
    count: int,
    *,
    prompt: int,
    cached: int,
    completion: int,
    sent: Sent,
) -> None:
    """`count` chat completions through the SDK; the mock reports the token counts asked of it."""
    client = stack.client(team.key)
    for _ in range(count):
        reply = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "How many tokens is this?"}],
            extra_body={
                "mock": {"prompt_tokens": prompt, "cached_tokens": cached, "completion_tokens": completion}
            },
        )
        usage = reply.usage
        assert usage is not None and usage.prompt_tokens_details is not None
        got_cached = usage.prompt_tokens_details.cached_tokens or 0
        sent.requests += 1
        sent.prompt += usage.prompt_tokens
        sent.cached += got_cached
        sent.completion += usage.completion_tokens
        sent.cost += expected_cost(model, usage.prompt_tokens, got_cached, usage.completion_tokens)
        sent.saving += expected_saving(model, got_cached)


@pytest.fixture(scope="module")
def usage(stack: ConsoleStack) -> dict[str, tuple[Team, dict[str, Sent]]]:
    """Two teams' usage, by model: team "north" on both models, team "south" on one."""
    made: dict[str, tuple[Team, dict[str, Sent]]] = {}
    plan = {
        "north": [("chat", 3, 1200, 400, 80), ("chat-mini", 2, 300, 0, 30)],
        "south": [("chat", 4, 500, 100, 50)],
    }
    for name, requests in plan.items():
        team = stack.new_team(f"{name}-{uuid.uuid4().hex[:6]}")
        by_model: dict[str, Sent] = {}
        for model, count, prompt, cached, completion in requests:
            sent = by_model.setdefault(model, Sent())
            send(stack, team, model, count, prompt=prompt, cached=cached, completion=completion, sent=sent)
        stack.wait_for_requests(team.id, sum(s.requests for s in by_model.values()))
        made[name] = (team, by_model)
    return made


def total(by_model: dict[str, Sent]) -> Sent:
    whole = Sent()
    for sent in by_model.values():
        whole.requests += sent.requests
        whole.prompt += sent.prompt
        whole.cached += sent.cached
        whole.completion += sent.completion
        whole.cost += sent.cost
        whole.saving += sent.saving
    return whole


def team_name(page: Page, team: Team) -> str:
    """The team's name as the page's team filter lists it."""
    return page.locator(f'select[name="team"] option[value="{team.id}"]').inner_text().strip()


def assert_totals(page: Page, sent: Sent) -> None:
    assert tile(page, "requests") == f"{sent.requests:,}"
    assert tile(page, "tokens") == f"{sent.tokens:,}"
    assert tile(page, "cost") == usd(sent.cost)
    assert tile(page, "cached_share") == sent.share()
    assert tile(page, "saving") == usd(sent.saving)


def test_the_admin_reads_each_teams_usage_off_the_charts_and_the_table(
    stack: ConsoleStack, usage: dict[str, tuple[Team, dict[str, Sent]]], sign_in: SignIn, shoot: Shoot
) -> None:
    page = sign_in(ADMIN_KEY)
    page.goto(stack.base_url + "/ui/usage?group=team")
    for team, by_model in usage.values():
        sent, name = total(by_model), team_name(page, team)
        assert chart(page, "requests")[name] == sent.requests
        assert chart(page, "tokens")[name] == sent.tokens
        assert usd(chart(page, "cost")[name]) == usd(sent.cost)
        assert table_sum(page, "requests", name) == sent.requests
        assert table_sum(page, "prompt_tokens", name) == sent.prompt
        assert table_sum(page, "cached_tokens", name) == sent.cached
        assert table_sum(page, "completion_tokens", name) == sent.completion
    north_name = team_name(page, usage["north"][0])
    assert any(f" · {north_name}: " in tip for tip in chart_tooltips(page, "requests")), (
        "a bar's tooltip names it"
    )

    north, by_model = usage["north"]
    page.select_option('select[name="team"]', north.id)
    page.select_option('select[name="group"]', "model")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(f"**team={north.id}**")
    assert_totals(page, total(by_model))
    requests_by_model = chart(page, "requests")
    assert requests_by_model == {model: sent.requests for model, sent in by_model.items()}
    assert usd(chart(page, "saving")["chat"]) == usd(by_model["chat"].saving)
    assert "chat-mini" not in chart(page, "saving"), "no cached tokens on chat-mini: nothing saved, no bar"
    shoot(page, "usage")


def test_the_csv_link_gives_the_same_report_exactly(
    stack: ConsoleStack, usage: dict[str, tuple[Team, dict[str, Sent]]], sign_in: SignIn
) -> None:
    north, by_model = usage["north"]
    page = sign_in(ADMIN_KEY)
    page.goto(stack.base_url + f"/ui/usage?team={north.id}&group=model")
    href = page.locator("a", has_text="CSV").get_attribute("href")
    assert href is not None and href.startswith("/ui/usage.csv?")
    reply = page.request.get(stack.base_url + href)
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(reply.text())))
    for model, sent in by_model.items():
        mine = [row for row in rows if row["model"] == model]
        assert sum(int(row["requests"]) for row in mine) == sent.requests
        assert sum(Decimal(row["cost"]) for row in mine) == sent.cost, "the CSV keeps every digit"
        assert sum(Decimal(row["saving"]) for row in mine) == sent.saving


def test_a_team_key_sees_its_own_usage_and_no_other_teams(
    stack: ConsoleStack, usage: dict[str, tuple[Team, dict[str, Sent]]], sign_in: SignIn
) -> None:
    (north, north_usage), (south, _) = usage["north"], usage["south"]
    page = sign_in(north.key)
    assert page.locator('[data-role="team"]').is_visible()
    assert page.locator('select[name="team"]').count() == 0, "a team key chooses no team"
    assert page.locator('select[name="group"] option[value="team"]').count() == 0
    assert_totals(page, total(north_usage))
    assert set(chart(page, "requests")) == {"all"}

    page.goto(stack.base_url + f"/ui/usage?team={south.id}&group=team")  # asking for another team
    assert_totals(page, total(north_usage))
    assert south.id not in page.content()
    reply = page.request.get(stack.base_url + f"/ui/usage.csv?team={south.id}&group=team")
    rows = list(csv.DictReader(io.StringIO(reply.text())))
    assert {row["team_id"] for row in rows} == {north.id}
    assert sum(int(row["requests"]) for row in rows) == total(north_usage).requests
