"""Exact token and cost totals in the usage report after streamed and non-streamed requests."""

from __future__ import annotations

from decimal import Decimal

import httpx

from tests.e2e.conftest import Stack

PROMPT, COMPLETION = 50, 7
MESSAGES = [{"role": "user", "content": "count me"}]


def cost(prompt: int, completion: int, input_price: str, output_price: str) -> Decimal:
    return (prompt * Decimal(input_price) + completion * Decimal(output_price)) / 1_000_000


def test_report_adds_up_across_two_teams(stack: Stack, fresh_upstream) -> None:
    fresh_upstream.set_behaviour(prompt_tokens=PROMPT, completion_tokens=COMPLETION)
    red, blue = stack.new_team("totals-red"), stack.new_team("totals-blue")
    red_client, blue_client = stack.client(red.key), stack.client(blue.key)

    red_client.chat.completions.create(model="chat", messages=MESSAGES)
    red_client.chat.completions.create(model="chat", messages=MESSAGES)
    list(red_client.chat.completions.create(model="chat", messages=MESSAGES, stream=True))
    list(
        red_client.chat.completions.create(
            model="chat", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    red_client.embeddings.create(model="embed", input="count me")
    blue_client.chat.completions.create(model="claude", messages=MESSAGES)
    list(blue_client.chat.completions.create(model="claude", messages=MESSAGES, stream=True))

    rows = {
        (row["team_id"], row["model"]): row
        for row in stack.usage(group_by="team,model")
        if row["team_id"] in (red.id, blue.id)
    }
    chat, embed, claude = rows[(red.id, "chat")], rows[(red.id, "embed")], rows[(blue.id, "claude")]
    assert (chat["requests"], chat["prompt_tokens"], chat["completion_tokens"]) == (4, 200, 28)
    assert Decimal(chat["cost"]) == 4 * cost(PROMPT, COMPLETION, "0.50", "1.50")
    assert (embed["requests"], embed["prompt_tokens"], embed["completion_tokens"]) == (1, 50, 0)
    assert Decimal(embed["cost"]) == cost(PROMPT, 0, "0.02", "0")
    assert (claude["requests"], claude["prompt_tokens"], claude["completion_tokens"]) == (2, 100, 14)
    assert Decimal(claude["cost"]) == 2 * cost(PROMPT, COMPLETION, "3", "15")

    # the team's own view sees exactly its rows, and CSV carries the same totals
    own = httpx.get(
        stack.base_url + "/gateway/usage",
        params={"group_by": "model"},
        headers={"authorization": f"Bearer {blue.key}"},
    ).json()["data"]
    assert [(r["model"], r["requests"], r["cost"]) for r in own] == [("claude", 2, claude["cost"])]
    csv_text = stack.admin.get(
        "/admin/usage", params={"group_by": "team", "team_id": red.id, "format": "csv"}
    ).text
    header, line = csv_text.strip().splitlines()
    assert header.startswith("team_id,requests,prompt_tokens")
    assert line.startswith(f"{red.id},5,250,28,")

    events = stack.admin.get("/admin/usage/events", params={"team_id": red.id, "limit": 2}).json()
    assert len(events["data"]) == 2
    assert events["next_cursor"]
    rest = stack.admin.get(
        "/admin/usage/events", params={"team_id": red.id, "limit": 10, "cursor": events["next_cursor"]}
    ).json()
    ids = [e["request_id"] for e in events["data"] + rest["data"]]
    assert len(ids) == len(set(ids)) == 5
    assert all(e["usage_source"] == "upstream" for e in events["data"] + rest["data"])
